"""The ``turn_edges`` check (``analysis/diagnose/checks/turn_edges.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.diagnose.stores import planted_causes, relative


@pytest.mark.parametrize(
    "run",
    ["template-small", "template-faint", pytest.param("template-loud", marks=pytest.mark.slow)],
)
def test_a_rendering_fault_at_turn_starts_is_named_a_template_fault(
    relative_store: Path, run: str
) -> None:
    """3x on the first token after each tool response decaying with the distance (the run is
    about 1.2x a healthy one overall; ``template-faint``: a draw whose largest-|r| tokens crowd
    the starts only 1.3 times chance), and 1000x: the turn starts, not a code path nor the
    tool turns' sampling, and no correction is the fix."""
    checks = relative._checks(relative_store, run)
    edges = checks["turn_edges"]
    assert edges.verdict == ("fail" if run == "template-loud" else "warn")
    assert edges.evidence.template and edges.evidence.decays
    assert edges.evidence.first_start.rate_ratio_ci[0] < 1.25  # first turns untouched
    assert checks["cause"].evidence.cause == "template"
    assert "rendering" in checks["cause"].finding and "token ids" in checks["cause"].next
    tool = checks["tool_responses"]
    if tool.verdict in relative.ALARM:
        assert "turn_edges" in tool.next and "sequence-level" not in tool.next
    if checks["localized"].verdict in relative.ALARM:
        assert "turn_edges" in checks["localized"].next


def test_fires_on_its_planted_cause_only(verdicts: dict) -> None:
    planted_causes.fires_on_its_cause_only("turn_edges", verdicts)
