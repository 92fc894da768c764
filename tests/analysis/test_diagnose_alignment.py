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


@pytest.fixture(scope="module")
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


@pytest.mark.parametrize(
    ("run", "verdict", "later"),
    [
        ("some-shifted", "fail", None),
        ("later-turns-shifted", "fail", 3),
        ("one-turn-shifted", "warn", 1),
    ],
)
def test_samples_shifted_by_a_position_are_found(
    store: Path, run: str, verdict: str, later: int | None
) -> None:
    checks = _checks(store, run)
    check = checks["alignment"]
    assert check.verdict == verdict
    found = check.evidence["misaligned_turns"]
    assert found["misaligned"] == found["one_position_later"] > 0
    assert found["samples"] and all("one position later" in s["what"] for s in found["samples"])
    if later is not None:
        assert found["misaligned"] == later
        assert all(s["what"].startswith("turn 1") for s in found["samples"])
    corr = check.evidence
    assert corr["correlation_lag0"] > corr["correlation_lag_plus1"]  # the whole stays aligned
    assert "off-by-one shift in some samples" in check.finding
    if verdict == "fail":
        assert checks["cause"].evidence["key"] == "data"


@pytest.mark.parametrize("run", ["zero-fills", "clean"])
def test_fills_and_aligned_samples_are_no_shift(store: Path, run: str) -> None:
    checks = _checks(store, run)
    assert checks["alignment"].verdict == "ok"
    assert checks["alignment"].evidence["misaligned_turns"]["misaligned"] == 0
    if run == "zero-fills":
        assert checks["sentinels"].verdict == "fail"


def test_sentinel_fills_are_no_shift_and_leave_the_semantics_unassessed(store: Path) -> None:
    """-9999 beside a logprob garbles every lag alike: no lag matches one position off, so no
    shift is claimed; the semantic regressions would measure the fill, so they are n/a, and the
    cause's evidence is the sentinels."""
    checks = _checks(store, "sentinel-fills")
    assert checks["sentinels"].verdict == "fail"
    assert checks["alignment"].verdict != "fail"
    assert "off-by-one" not in checks["alignment"].finding
    for name in ("offset", "temperature", "top_p"):
        assert checks[name].verdict == "n/a", name
        assert "fill values" in checks[name].finding
    cause = checks["cause"].evidence
    assert cause["key"] == "data" and cause["because"].startswith("sentinels")


def test_a_loud_fault_on_one_gpu_is_no_alignment_warning(tmp_path: Path) -> None:
    """A gpu at 3,000x lowers the lag-0 correlation below 0.8, yet it stays far above the
    shifted lags': the sides are aligned, the mismatch is large, another layer names it."""
    path = write(Plan("gpu", per_step=32, seed=7, factor=3000.0), tmp_path / "gpu.parquet")
    mismatchctl.ingest([path], run="gpu", store=tmp_path / "store")
    check = _checks(tmp_path / "store", "gpu")["alignment"]
    ev = check.evidence
    assert ev["correlation_lag0"] > 2 * max(
        ev["correlation_lag_plus1"], ev["correlation_lag_minus1"]
    )
    assert check.verdict == "ok", check.finding
