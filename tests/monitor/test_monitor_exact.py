"""The Monitor against the dump path: the same tensors given to ``Monitor.update`` (several steps
of several micro-batches) and to ``DumpWriter.add`` then ``ingest``: the Monitor's per-step
numbers (reduced on the tensors' device) are the report's to 1e-9, its per-bin states the
report's probability bins, and the store it writes gives the report, explain and diagnose JSON
of the ingested dump. On CPU tensors, numpy arrays, ragged rows, and CUDA when there is one."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mismatchctl import DumpWriter, Monitor, api
from mismatchctl.engines import plan as K
from mismatchctl.stats import registry as M
from mismatchctl.stats.partial import shares
from tests.helpers import slow_param

torch = pytest.importorskip("torch")

RUN = "r7"
STEPS = (1, 2, 3)


def batch(rng: np.random.Generator, rows: int, width: int) -> dict[str, np.ndarray]:
    """A micro-batch as a trainer holds it: float32 logprobs (the rollout's 0.0 past the mask),
    a response mask with tool responses (0 inside) and right padding, an empty response, a
    token past the float32 ratio's clamp, token ids and per-token entropy."""
    lt = -rng.exponential(0.8, (rows, width)).astype(np.float32)
    lr = (lt + rng.normal(0, 0.04, (rows, width))).clip(max=0).astype(np.float32)
    mask = np.zeros((rows, width), np.int64)
    for i in range(1, rows):  # row 0: no model token (an empty response)
        n = int(rng.integers(3, width + 1))
        mask[i, :n] = 1
        if i % 2 and n > 9:
            mask[i, 4:7] = 0  # a tool response: two turns
    lt[2, 0] = lr[2, 0] - 22.0  # |r| beyond the chi2 clamp (20) and the tails' clamp
    lr[mask == 0] = 0.0
    return {
        "rollout": lr,
        "trainer": lt,
        "mask": mask,
        "tokens": rng.integers(0, 50_000, (rows, width)),
        "entropy": rng.exponential(1.0, (rows, width)).astype(np.float32),
    }


def steps_of(seed: int = 7) -> dict[int, list[dict[str, np.ndarray]]]:
    rng = np.random.default_rng(seed)
    return {s: [batch(rng, int(rng.integers(4, 9)), 40) for _ in range(3)] for s in STEPS}


def as_kind(b: dict[str, np.ndarray], kind: str) -> dict[str, Any]:
    if kind == "numpy":
        return b
    device = "cuda" if kind == "cuda" else "cpu"
    out = {k: torch.from_numpy(v).to(device) for k, v in b.items()}
    if kind == "ragged":  # slime's lists of 1-D rows, each as long as its response
        cut = [int(np.flatnonzero(r).max()) + 1 if r.any() else 0 for r in b["mask"]]
        out = {k: [v[i, : cut[i]] for i in range(len(cut))] for k, v in out.items()}
    return out


def run_both(tmp: Path, kind: str) -> tuple[dict[int, dict], dict[int, tuple], Path, Path]:
    """The same calls to a Monitor (into store ``mon``) and a DumpWriter (ingested into store
    ``dump``); the Monitor's metrics and per-bin partials of each step, before its flush."""
    mon = Monitor(RUN, tmp / "mon", tags={"gpu": "H100"})
    metrics, bins = {}, {}
    with DumpWriter(tmp / "dumps", tags={"gpu": "H100"}) as writer:
        for step, calls in steps_of().items():
            for b in calls:
                t = as_kind(b, kind)
                args = (step, t["rollout"], t["trainer"], t["mask"])
                extra = {"token_ids": t["tokens"], "entropy": t["entropy"]}
                mon.update(*args, **extra)
                writer.add(*args, **extra)
            metrics[step], bins[step] = mon.metrics(), (mon.partial(), mon.bin_partials())
            mon.flush()
    mon.close()
    api.ingest([tmp / "dumps"], RUN, store=tmp / "dump")
    return metrics, bins, tmp / "mon", tmp / "dump"


def close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    return a == b


def same_json(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two JSON trees differ (NaN equal to NaN)."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b))
        return [d for k in keys for d in same_json(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in same_json(x, y, f"{path}[{i}]")
        ]
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return []
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


KINDS = [
    "torch-cpu",
    slow_param(
        "numpy"
    ),  # the same arithmetic as torch-cpu once on the host (tests/monitor/test_device.py)
    slow_param("ragged"),
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    ),
]


@pytest.mark.parametrize("kind", KINDS)
def test_every_report_number_of_each_step_is_the_ingested_dumps(tmp_path: Path, kind: str) -> None:
    metrics, bins, _, dump = run_both(tmp_path, kind)
    rep = api.report([RUN], store=dump, by=["step,bin"])
    groups = rep.split(K.RUN, K.STEP)
    assert [int(g.by[K.STEP]) for g in groups] == list(STEPS)
    for g in groups:
        got = metrics[int(g.by[K.STEP])]
        wrong = {k: (v, got.get(k)) for k, v in g.metrics.items() if not close(v, got.get(k))}
        assert not wrong
        assert len(g.metrics) >= 30 and got[M.TOKENS] == g.metrics[M.TOKENS] > 0
    cells = rep.split(K.STEP, K.BIN)
    assert cells
    for g in cells:
        whole, per_bin = bins[int(g.by[K.STEP])]
        part = per_bin[int(g.by[K.BIN])]  # the bin's index
        got = {**part.finalize(), **shares(part, whole)}
        wrong = {k: (v, got.get(k)) for k, v in g.metrics.items() if not close(v, got.get(k))}
        assert not wrong, g.by
        assert g.metrics[M.LOG_RATIO_P50] is not None


@pytest.mark.parametrize("kind", ["torch-cpu", slow_param("numpy")])
def test_the_store_it_writes_is_the_ingested_dumps(tmp_path: Path, kind: str) -> None:
    """report, explain and diagnose read the Monitor's store as they read the ingested dump."""
    _, _, mon, dump = run_both(tmp_path, kind)
    for call in (
        lambda store: api.report([RUN], store=store, by=["step"]).to_dict(),
        lambda store: api.explain(f"{RUN}@steps=3", f"{RUN}@steps=1..2", store=store).to_dict(),
        lambda store: api.diagnose(RUN, store=store).to_dict(),
    ):
        assert same_json(call(mon), call(dump)) == []
    tokens = {s: api.runs(store=s)[0] for s in (mon, dump)}
    assert tokens[mon].tags == tokens[dump].tags == {"gpu": "H100"}
