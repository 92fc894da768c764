"""What the tests of `whatif --preset` share (tests/stats/presets/test_preset_*.py): random
batches of sequences, a preset run over parts of whole sequences and merged, the padded batch
a framework's trainer holds, and the per-step groups of `whatif --preset` through the command
line on a store of those batches."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

import mismatchctl
from mismatchctl.stats.presets.base import Config, Preset, merge
from tests.helpers import cli

Batch = tuple[list[np.ndarray], list[np.ndarray]]  # per sequence: rollout, trainer logprobs


def exp_batch(
    seed: int,
    n_seq: int,
    scales: Sequence[float],
    lengths: tuple[int, int] = (1, 30),
    length: int | None = None,
) -> Batch:
    """``n_seq`` sequences of ``lengths`` (numpy's half-open range; every one ``length`` when
    given) tokens: rollout logprobs -Exp(1), the trainer's off by N(0, s) with s drawn per
    sequence from ``scales``."""
    rng = np.random.default_rng(seed)
    lrs, lts = [], []
    for _ in range(n_seq):
        n = length if length is not None else int(rng.integers(*lengths))
        lr = -rng.exponential(1.0, n)
        lrs.append(lr)
        lts.append(lr + rng.normal(0, rng.choice(scales), n))
    return lrs, lts


def run_preset(
    preset: Preset,
    lrs: list[np.ndarray],
    lts: list[np.ndarray],
    config: Config,
    parts: int = 3,
    turns: list[np.ndarray] | None = None,
) -> dict[str, Any]:
    """The preset's metrics of the sequences in one cell, computed over ``parts`` runs of
    whole sequences and merged (``turns``: each sequence's turn index, for ROLL's segments)."""
    preset.check(config)
    names = preset.fields(config)
    state = None
    for cut in np.array_split(np.arange(len(lrs)), parts):
        lr = np.concatenate([lrs[i] for i in cut])
        lt = np.concatenate([lts[i] for i in cut])
        seq = np.repeat(cut, [len(lrs[i]) for i in cut])
        args = (lr, lt, seq, np.zeros(len(lr), np.int64), 1, config)
        if turns is None:
            s = preset.compute(*args)[0]
        else:  # ROLL's compute takes each token's turn
            turn = np.concatenate([turns[i] for i in cut])
            s = preset.compute(*args, turn=turn)[0]  # type: ignore[call-arg]
        state = s if state is None else merge(state, s, names)
    return preset.finalize(state, config)


def padded(lrs: list[np.ndarray], lts: list[np.ndarray]) -> tuple[torch.Tensor, ...]:
    """The batch as a trainer holds it: (trainer, rollout, mask), float64 ``[B, T]``, each
    sequence padded right with 0.0 and a 0 mask."""
    width = max(len(a) for a in lrs)
    trainer = torch.zeros(len(lrs), width, dtype=torch.float64)
    rollout = torch.zeros_like(trainer)
    mask = torch.zeros_like(trainer)
    for i, (a, t) in enumerate(zip(lrs, lts, strict=True)):
        rollout[i, : len(a)], trainer[i, : len(a)], mask[i, : len(a)] = (
            torch.tensor(a), torch.tensor(t), 1.0,
        )  # fmt: skip
    return trainer, rollout, mask


def ingest_steps(store: Path, tmp_path: Path, run: str, batches: dict[int, Batch]) -> None:
    """One dump of the batches, a step each (sample ids ``STEP-I``), ingested as ``run``."""
    rows = []
    for step, (lrs, lts) in batches.items():
        for i, (a, t) in enumerate(zip(lrs, lts, strict=True)):
            rows.append(dict(step=step, uid=f"{step}-{i}", rollout_log_probs=a.tolist(),
                             old_log_probs=t.tolist()))  # fmt: skip
    pq.write_table(pa.table({k: [r[k] for r in rows] for k in rows[0]}), tmp_path / "d.parquet")
    mismatchctl.ingest([tmp_path / "d.parquet"], run=run, store=store)


def whatif_per_step(run: str, preset: str, sets: list[str]) -> tuple[dict, dict[int, dict]]:
    """`whatif RUN --preset PRESET --set ...` as JSON: the document, and each step's metrics
    (its (run, step) group)."""
    ran = cli("whatif", run, "--preset", preset,
              *[a for s in sets for a in ("--set", s)], "--json", "-", "-q")  # fmt: skip
    assert ran.code == 0, ran.err
    doc = json.loads(ran.out)["whatif"]
    assert doc["preset"] == preset
    per_step = {
        g["by"]["step"]: g["metrics"] for g in doc["groups"] if set(g["by"]) == {"run", "step"}
    }
    return doc, per_step


def listed_preset(name: str) -> dict[str, Any]:
    """The preset as `whatif --list-presets --json -` lists it."""
    ran = cli("whatif", "--list-presets", "--json", "-")
    assert ran.code == 0, ran.err
    return next(p for p in json.loads(ran.out)["presets"] if p["preset"] == name)


def refused(preset: str, sets: list[str]) -> str:
    """The error of `whatif x --preset PRESET --set ...` (exit 1, with a hint)."""
    ran = cli("whatif", "x", "--preset", preset, *[a for s in sets for a in ("--set", s)], "-q")
    assert ran.code == 1 and "Hint:" in ran.err, ran.err
    return ran.err


def nonpositive(batch: Batch) -> Batch:
    """The batch with the trainer's logprobs clamped to 0 at most, as ingest requires."""
    lrs, lts = batch
    return lrs, [np.minimum(t, 0.0) for t in lts]
