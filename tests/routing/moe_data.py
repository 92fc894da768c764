"""Dumps with MoE routes on both sides for the routing views' tests, and the per-token reference.

Routes come from ``routes_fixture.routes`` (the engine's top-k from bfloat16 router logits, the
trainer's from float32), then flips are planted at chosen layers (one expert of the trainer's set
replaced by one neither side chose), some engine rows are not recorded (``-1``), and half the
sequences have a tool response (a later turn). ``token_records`` gives, per model token, its
split keys and its routing by the definitions of docs/metrics.md ("Routing"), over sets, with a
plain Python loop: the reference the tests aggregate per group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl.stats.positions import LOG2_EDGES
from tests.routing.routes_fixture import routes

EXPERTS, TOP_K = 8, 2


@dataclass
class Seq:
    """One response: routes ``[T, layers, top_k]`` (``-1``: not recorded), mask, logprobs."""

    uid: str
    step: int
    gpu: str
    prompt: int
    eng: np.ndarray
    tr: np.ndarray
    mask: np.ndarray
    rollout: np.ndarray
    trainer: np.ndarray = field(default_factory=lambda: np.zeros(0))


def plant_flip(
    eng: np.ndarray, tr: np.ndarray, j: int, layer: int, rng: np.random.Generator
) -> None:
    """Replace one expert of the trainer's set at row ``j``, layer ``layer``, by one that
    neither side chose there."""
    free = sorted(set(range(EXPERTS)) - set(eng[j, layer]) - set(tr[j, layer]))
    tr[j, layer, int(rng.integers(TOP_K))] = free[int(rng.integers(len(free)))]


def sequences(
    seed: int,
    n: int,
    layers: int,
    *,
    steps: tuple[int, ...] = (1, 2, 3),
    gpus: tuple[str, ...] = ("H20", "A100"),
    flip: float = 0.12,
    flip_layers: tuple[int, ...] | None = None,
    lengths: tuple[int, int] = (8, 24),
) -> list[Seq]:
    """``n`` responses with planted flips (probability ``flip`` per position, at a layer drawn
    from ``flip_layers``, all layers by default, and sometimes at a second, later one); the
    logprobs are drawn later (``draw_logprobs``)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = int(rng.integers(*lengths))
        eng, tr = routes(t, layers, EXPERTS, TOP_K, seed=seed * 1000 + i)
        tr = tr.copy()
        for j in range(t):
            if rng.random() < flip:
                layer = int(rng.choice(flip_layers or range(layers)))
                plant_flip(eng, tr, j, layer, rng)
                if layer + 1 < layers and rng.random() < 0.3:
                    plant_flip(eng, tr, j, int(rng.integers(layer + 1, layers)), rng)
        if i % 5 == 2:
            eng[t // 2] = -1  # a row the engine did not record
        mask = np.ones(t, np.int64)
        if i % 2:
            mask[t // 3 : t // 3 + 2] = 0  # a tool response: a later turn follows
        rollout = -rng.exponential(0.4, t)
        out.append(
            Seq(f"s{seed}-{i}", steps[i % len(steps)], gpus[i % len(gpus)], int(rng.integers(0, 40)),
                eng, tr, mask, rollout)
        )  # fmt: skip
    return out


def producing(s: Seq, t: int) -> int:
    """The producing row's ``route_paired`` (input alignment: row ``t - 1``): -1 not compared,
    0 equal on every layer, 1 + the lowest differing layer."""
    q = t - 1
    if q < 0 or (s.eng[q] < 0).any() or (s.tr[q] < 0).any():
        return -1
    differ = [set(a) != set(b) for a, b in zip(s.eng[q], s.tr[q], strict=True)]
    return 1 + differ.index(True) if any(differ) else 0


def draw_logprobs(
    seqs: list[Seq], seed: int, noise: float = 0.03, hot: float = 1.0, hot_layer: int | None = None
) -> None:
    """Trainer logprobs: the rollout's plus noise, ``hot`` times larger on tokens whose
    producing position flipped (at ``hot_layer`` first, when given)."""
    rng = np.random.default_rng(seed)
    for s in seqs:
        scale = np.full(len(s.mask), noise)
        for t in range(len(s.mask)):
            p = producing(s, t)
            if p >= 1 and (hot_layer is None or p - 1 == hot_layer):
                scale[t] *= hot
        s.trainer = np.minimum(s.rollout + rng.normal(0, 1, len(s.mask)) * scale, 0.0)


def write(path: Path, seqs: list[Seq], routes: bool = True) -> Path:
    """The Parquet sequence layout, routes response-aligned (nested lists; none without
    ``routes``)."""
    table = pa.table(
        {
            "step": [s.step for s in seqs],
            "uid": [s.uid for s in seqs],
            "gpu": [s.gpu for s in seqs],
            "prompt_length": [s.prompt for s in seqs],
            "rollout_log_probs": [s.rollout.tolist() for s in seqs],
            "old_log_probs": [s.trainer.tolist() for s in seqs],
            "response_mask": [s.mask.tolist() for s in seqs],
            "rollout_routed_experts": [s.eng.tolist() for s in seqs],
            "trainer_routed_experts": [s.tr.tolist() for s in seqs],
        }
    )
    if not routes:
        table = table.drop_columns(["rollout_routed_experts", "trainer_routed_experts"])
    pq.write_table(table, path)
    return path


def _kv_label(position: int) -> int:
    return max(e for e in LOG2_EDGES if e <= position)


def token_records(
    seqs: list[Seq], run: str, tags: dict[str, str], edges: np.ndarray, replay: bool = False
) -> list[dict[str, Any]]:
    """Per model token: its split keys and its routing sums by the definitions."""
    out = []
    for s in seqs:
        layers = s.eng.shape[1]
        r = s.trainer - s.rollout

        def compared(j: int, s: Seq = s) -> bool:
            return j >= 0 and (s.eng[j] >= 0).all() and (s.tr[j] >= 0).all()

        def differs(j: int, s: Seq = s) -> bool:
            return any(set(a) != set(b) for a, b in zip(s.eng[j], s.tr[j], strict=True))

        model = np.flatnonzero(s.mask)
        for t in model:
            turn = int(np.sum(np.diff(s.mask[: t + 1]) == 1))  # model runs started before t
            p = float(np.exp(s.rollout[t]))
            rec: dict[str, Any] = {
                "run": run,
                "step": s.step,
                "gpu": s.gpu,
                "turn_kind": "first" if turn == 0 else "later",
                "kv_position": _kv_label(s.prompt + int(t)),
                "bin": min(int(np.sum(edges[1:-1] <= p)), len(edges) - 2),
                **{f"tag:{k}": v for k, v in tags.items()},
                "layers": layers,
                "k3": float(np.expm1(r[t]) - r[t]),
                "compared": compared(int(t)),
                "replay": replay,
            }
            if rec["compared"]:
                sets = [(set(a), set(b)) for a, b in zip(s.eng[t], s.tr[t], strict=True)]
                rec["equal_layers"] = sum(a == b for a, b in sets)
                rec["overlap"] = sum(len(a & b) for a, b in sets)
            rec["paired"] = producing(s, int(t))
            rec["after"] = any(compared(q) and differs(q) for q in range(int(t)))
            out.append(rec)
    return out


def reference(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The eleven metrics of a group of token records (docs/metrics.md, Routing)."""

    def mean(values: list[float]) -> float | None:
        return float(np.mean(values)) if values else None

    comp = [x for x in records if x["compared"]]
    flip = [x["k3"] for x in records if x["paired"] >= 1]
    same = [x["k3"] for x in records if x["paired"] == 0]
    replayed = [x for x in comp if x["replay"]]
    slots = sum(x["layers"] for x in comp)
    return {
        "routing_token_agreement": (
            sum(x["equal_layers"] == x["layers"] for x in comp) / len(comp) if comp else None
        ),
        "routing_layer_agreement": sum(x["equal_layers"] for x in comp) / slots if slots else None,
        "routing_overlap_mean": sum(x["overlap"] for x in comp) / (slots * TOP_K)
        if slots
        else None,
        "routing_missing_tokens": len(records) - len(comp),
        "vllm_kl_flipped": mean(flip),
        "vllm_kl_same": mean(same),
        "routing_k3_share_flipped": sum(flip) / (sum(flip) + sum(same)) if flip or same else None,
        "routing_unpaired_tokens": sum(x["paired"] < 0 for x in records),
        "vllm_kl_after_flip": mean([x["k3"] for x in records if x["after"]]),
        "vllm_kl_before_flip": mean([x["k3"] for x in records if not x["after"]]),
        "r3_violation_fraction": (
            sum(x["equal_layers"] < x["layers"] for x in replayed) / len(replayed)
            if replayed
            else None
        ),
    }


def close(got: dict[str, Any], want: dict[str, Any], what: str = "") -> None:
    """Metrics equal to the reference (counts exactly, ratios to 1e-12)."""
    import pytest

    assert got.keys() == want.keys(), what
    for k, v in want.items():
        if v is None or isinstance(v, int):
            assert got[k] == v, (what, k)
        else:
            assert got[k] == pytest.approx(v, rel=1e-12, abs=1e-15), (what, k)
