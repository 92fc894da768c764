"""The ``turn_ends`` check (``analysis/diagnose/checks/turn_ends.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.planted import checks as diagnosed


def test_a_mismatch_growing_toward_the_end_is_not_the_stop(ends_store: Path) -> None:
    checks = diagnosed(ends_store, "long-10x")
    ends = checks["turn_ends"]
    assert ends.verdict == "ok"
    assert ends.evidence.worst.last.rate_ratio > 1.2  # the later turns' ends are hot...
    assert ends.evidence.worst.last_vs_before.rate_ratio_ci[0] < 1.5  # ...as the tokens before
    assert checks["cause"].evidence.cause == "code_path"


def test_a_healthy_run_has_no_stop_fault(ends_store: Path) -> None:
    checks = diagnosed(ends_store, "healthy")
    assert checks["turn_ends"].verdict == "ok"
    assert checks["cause"].evidence.cause == "none"


def test_a_selection_of_runs_is_judged_run_by_run(ends_store: Path) -> None:
    """The faulty run and a healthy one selected by a tag: the check names the faulty run, with
    the numbers it has alone."""
    ends = diagnosed(ends_store, "fleet=b")["turn_ends"]
    assert ends.verdict == "warn" and ends.evidence.run == "stop-3x"
    assert set(ends.evidence.runs) == {"stop-3x", "healthy"}
    alone = diagnosed(ends_store, "stop-3x")["turn_ends"].evidence
    assert ends.evidence.runs["stop-3x"] == alone.worst
    assert ends.evidence.runs["healthy"].last.rate_ratio_ci[0] < 1.5
