"""diagnose on a fault of some requests that no column names: one sequence in eight (by a hash
of its sample id: an inference replica of eight) with its mismatch 3x or 10x. It was passed
without a baseline and named a uniform policy mismatch with one; the hot_sequences check finds
the sequences hotter than the others of their step, and the cause is "sequences". Healthy and
improved runs, and faults the other checks name (a gpu, the tool turns, a step), leave it quiet.

The dumps are tests/planted.py's runs, scaled with ``write_scaled``."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from tests.planted import Plan, checks, write, write_scaled

ALARM = ("warn", "fail")


def _replica(factor: float):
    def scale(row: dict, kv: np.ndarray) -> np.ndarray:
        return np.full(len(kv), factor if zlib.crc32(row["uid"].encode()) % 8 == 0 else 1.0)

    return scale


SCALED = {"some-3x": (1, 3.0), "some-10x": (2, 10.0), "healthy": (3, 1.0), "base": (99, 1.0)}


PLANTED = {"gpu-3x": Plan("gpu", per_step=32, seed=1, factor=3.0),
           "tool-3x": Plan("tool", per_step=32, seed=1, factor=3.0),
           "spike-10x": Plan("spike", per_step=32, seed=1, factor=10.0),
           "improved": Plan("improved", per_step=32, seed=1)}  # fmt: skip


SOURCES = ("gsm8k", "math", "code", "search")


def _source(row: dict) -> str:
    return SOURCES[zlib.crc32(row["uid"].encode()) % 4]


def _with_sources(path: Path) -> None:
    """A per-sample ``data_source`` column (an attribute ingest keeps)."""
    table = pq.read_table(path)
    sources = pa.array([_source(row) for row in table.to_pylist()])
    pq.write_table(table.append_column("data_source", sources), path)


def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sequences")
    source = root / "source-3x.parquet"
    plan = Plan("clean", per_step=32, seed=1)
    write_scaled(
        plan, source, lambda row, kv: np.full(len(kv), 3.0 if _source(row) == "code" else 1.0)
    )
    _with_sources(source)
    mismatchctl.ingest([source], run="source-3x", store=root / "store")
    for name, (seed, factor) in SCALED.items():
        plan = Plan("clean", per_step=32, seed=seed)
        path = write_scaled(plan, root / f"{name}.parquet", _replica(factor))
        fleet = {"fleet": "b"} if name in ("some-3x", "healthy") else {}
        mismatchctl.ingest([path], run=name, store=root / "store", tags=fleet)
    for name, plan in PLANTED.items():
        path = write(plan, root / f"{name}.parquet", weight_version=False)
        mismatchctl.ingest([path], run=name, store=root / "store")
    return root / "store"


def _checks(store: Path, run: str, baseline: str | None = None) -> dict:
    return checks(store, run, baseline)  # diagnosed once: several tests read the same runs


POOLED = {
    "some-topp": ("sem-topp-subtle", "h-a", "h-b"),
    "some-rep": ("sem-rep-subtle", "h-a", "h-b"),
    "some-stale": ("pol-stale-iter", "h-a", "h-b"),
    "some-template": ("tpl-escaped-quotes", "h-a", "h-b"),
    "pooled-healthy": ("h-a", "h-b"),
    "some-topp-splitkv": ("sem-topp-subtle", "cp-splitkv-subtle", "h-a"),
    "some-rep-template": ("sem-rep-subtle", "tpl-escaped-quotes", "h-a"),
}
"""Runs pooled from the committed calibration runs (``sample_data/pooled.py``): a third of the
requests with a top-p truncation, a repetition penalty, weights one step behind or a re-rendered
template, the others healthy; the two healthy runs as one; and a third with top-p or a penalty
beside a third with a split-KV path or a re-rendered template, the last third healthy."""


def pooled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sample_data.pooled import pool
    from tests.analysis.diagnose.stores.calibration import CORPUS

    root = tmp_path_factory.mktemp("pooled")
    for name, names in POOLED.items():
        path = pool(CORPUS / "runs", names, root / "runs" / name)
        mismatchctl.ingest([path], run=name, store=root / "store")
    return root / "store"
