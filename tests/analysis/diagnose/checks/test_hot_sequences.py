"""The ``hot_sequences`` check (``analysis/diagnose/checks/hot_sequences.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mismatchctl.analysis.diagnose.checks.hot_sequences import T
from tests.analysis.diagnose.stores import requests
from tests.helpers import slow_param


@pytest.mark.parametrize(
    "run", ["healthy", "tool-3x", *(slow_param(r) for r in ("improved", "gpu-3x", "spike-10x"))]
)
def test_no_hot_sequences_where_no_request_is_singled_out(sequences_store: Path, run: str) -> None:
    checks = requests._checks(sequences_store, run)
    assert checks["hot_sequences"].verdict == "ok", checks["hot_sequences"].finding
    assert checks["cause"].evidence.cause != "sequences"


def test_a_selection_of_runs_is_judged_run_by_run(sequences_store: Path) -> None:
    """Two runs selected by a tag, one with hot requests: the check names that run (over both
    runs together the hot ones would be half the share)."""
    hot = requests._checks(sequences_store, "fleet=b")["hot_sequences"]
    assert hot.verdict in requests.ALARM
    assert hot.evidence.run == "some-3x" and hot.finding.startswith("some-3x: ")
    runs = hot.evidence.runs
    assert set(runs) == {"some-3x", "healthy"}
    alone = requests._checks(sequences_store, "some-3x")["hot_sequences"].evidence
    assert runs["some-3x"] == alone.worst
    assert runs["healthy"].hot < T.SEQ_HOT_MIN
