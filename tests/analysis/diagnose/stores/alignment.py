"""diagnose on dumps whose two sides are shifted by one position in some samples only (one
worker's batches, the turns after a tool response sliced with an offset): the lag correlations
of the whole selection stay aligned, the turn-by-turn test (``stats/misalign.py``) finds them,
and the cause is the data. Fills of 0.0 on one side are the sentinels check's, not a shift."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import api
from tests.planted import Plan, write

Edit = Callable[[dict], None]


def _shift_all(row: dict) -> None:  # the trainer array one position later
    row["old_log_probs"] = [0.0, *row["old_log_probs"][:-1]]


def _shift_later_turn(row: dict) -> None:  # only the turn after the tool response
    mask = np.asarray(row["response_mask"])
    tool = np.flatnonzero(mask == 0)
    if len(tool):
        train = np.asarray(row["old_log_probs"])
        start = tool[-1] + 1
        train[start:] = np.r_[0.0, train[start:-1]]
        row["old_log_probs"] = train.tolist()


def _zero_tail(row: dict) -> None:  # 0.0 fills on the last 8 model tokens
    train = np.asarray(row["old_log_probs"])
    train[np.flatnonzero(np.asarray(row["response_mask"]))[-8:]] = 0.0
    row["old_log_probs"] = train.tolist()


def _sentinel_tail(row: dict) -> None:  # SkyRL's -9999 on the last 8 model tokens
    train = np.asarray(row["old_log_probs"])
    train[np.flatnonzero(np.asarray(row["response_mask"]))[-8:]] = -9999.0
    row["old_log_probs"] = train.tolist()


RUNS: dict[str, tuple[int, Edit, Callable[[int], bool]]] = {
    "some-shifted": (1, _shift_all, lambda i: i % 100 == 7),  # 1% of the samples
    "later-turns-shifted": (2, _shift_later_turn, lambda i: i in (4, 300, 620)),
    "one-turn-shifted": (3, _shift_later_turn, lambda i: i == 8),
    "zero-fills": (4, _zero_tail, lambda i: i % 20 == 3),
    "sentinel-fills": (6, _sentinel_tail, lambda i: i % 20 == 3),
    "clean": (5, _shift_all, lambda i: False),
}


def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("alignment")
    for name, (seed, edit, which) in RUNS.items():
        path = write(Plan("clean", per_step=32, seed=seed), root / f"{name}.parquet")
        table = pq.read_table(path)
        rows = table.to_pylist()
        for i, row in enumerate(rows):
            if which(i):
                edit(row)
        pq.write_table(table.from_pylist(rows, schema=table.schema), path)
        mismatchctl.ingest([path], run=name, store=root / "store")
    return root / "store"


def _checks(store: Path, run: str) -> dict:
    return {c.name: c for c in api.diagnose(run, store=store).checks}
