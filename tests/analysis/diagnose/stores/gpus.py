"""diagnose on faults confined to one gpu generation, and on faults beside a hot gpu: the cause
is the hardware when every code-path finding lies on that gpu (alone, with other dimensions, or
as elevated steps that are the gpu's), a code path when a part of the run is hot on every gpu;
and faults of most gpus against one (no gpu stands out from the median of the others).

The dumps are tests/planted.py's, with the mismatch of chosen tokens scaled afterwards as the
planted causes scale theirs: the trainer side is ``lr * exp(sigma * eps)``, and ``sigma`` times
``sqrt(f)`` multiplies a token's K3 by about ``f``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import api
from tests.planted import Plan, write_scaled

PER_STEP = 32


Scale = Callable[[dict, np.ndarray], np.ndarray]  # (row, model tokens' KV positions) -> factor


def _on(gpu: str, factor: float, when: Callable[[dict, np.ndarray], np.ndarray]) -> Scale:
    def scale(row: dict, kv: np.ndarray) -> np.ndarray:
        hit = when(row, kv) if row["gpu"] == gpu else np.zeros(len(kv), bool)
        return np.where(hit, factor, 1.0)

    return scale


def _everywhere(row: dict, kv: np.ndarray) -> np.ndarray:
    return np.ones(len(kv), bool)


RUNS: dict[str, tuple[Plan, Scale]] = {
    # A100 at 20x its mismatch from step 12 on: the run's steps change there, on A100 only
    "gpu-grows": (
        Plan("clean", per_step=PER_STEP, seed=31),
        _on("A100", 20.0, lambda row, kv: np.full(len(kv), row["step"] >= 12)),
    ),
    # A100 at 30x on its tokens at KV positions >= 32 (a long-context kernel of one gpu)
    "gpu-long": (
        Plan("clean", per_step=PER_STEP, seed=32),
        _on("A100", 30.0, lambda row, kv: kv >= 32),
    ),
    # spikes on every gpu (1000x in two steps) beside an A100 at 10x everywhere
    "spikes-and-gpu": (
        Plan("spike", per_step=PER_STEP, seed=33, factor=1000),
        _on("A100", 10.0, _everywhere),
    ),
}


def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gpu")
    for name, (plan, scale) in RUNS.items():
        path = write_scaled(plan, root / f"{name}.parquet", scale)
        mismatchctl.ingest([path], run=name, store=root / "store")
    return root / "store"


def _checks(store: Path, run: str) -> dict:
    return {c.name: c for c in api.diagnose(run, store=store).checks}


FOUR = ("A100", "L20", "A10", "H20")


def _four_gpus(row: dict) -> str:  # responses dealt to four gpu generations in turn
    return FOUR[int(row["uid"].split("-")[1]) % len(FOUR)]


def four(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three of four gpu generations at 3x (a kernel fault off Hopper), and a healthy run."""
    root = tmp_path_factory.mktemp("four")
    hot = {"A100", "L20", "A10"}
    for name, factor in (("three-hot", 3.0), ("four-healthy", 1.0)):

        def scale(row: dict, kv: np.ndarray, factor: float = factor) -> np.ndarray:
            return np.full(len(kv), factor if _four_gpus(row) in hot else 1.0)

        path = write_scaled(
            Plan("clean", per_step=PER_STEP, seed=41), root / f"{name}.parquet", scale
        )
        table = pq.read_table(path)
        rows = table.to_pylist()
        for row in rows:
            row["gpu"] = _four_gpus(row)
        pq.write_table(table.from_pylist(rows, schema=table.schema), path)
        mismatchctl.ingest([path], run=name, store=root / "store")
    return root / "store"


def one_gpu_each(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs all on one gpu: a baseline on H20, targets on A100 at 3x and at the same level; and a
    baseline whose dumps name no gpu (``base-none``)."""
    root = tmp_path_factory.mktemp("one-gpu-each")
    for name, seed, gpu, factor in (
        ("base-h20", 43, "H20", 1.0),
        ("a100-3x", 44, "A100", 3.0),
        ("a100-same", 45, "A100", 1.0),
        ("h20-3x", 46, "H20", 3.0),
        ("base-none", 47, None, 1.0),
    ):
        path = write_scaled(
            Plan("clean", per_step=PER_STEP, seed=seed),
            root / f"{name}.parquet",
            lambda row, kv, factor=factor: np.full(len(kv), factor),
        )
        table = pq.read_table(path)
        rows = table.to_pylist()
        for row in rows:
            row["gpu"] = gpu
        pq.write_table(table.from_pylist(rows, schema=table.schema), path)
        mismatchctl.ingest([path], run=name, store=root / "store")
    return root / "store"


def _against(store: Path, run: str, baseline: str) -> dict:
    return {c.name: c for c in api.diagnose(run, store=store, baseline=baseline).checks}
