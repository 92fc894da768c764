"""The ``turn_edges`` check (``analysis/diagnose/checks/turn_edges.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.diagnose.stores import planted_causes, relative
from tests.planted import diagnosis


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


def test_a_burst_that_is_not_monotonic_within_the_first_eight_still_decays(
    held_out_store: Path,
) -> None:
    """``tpl-strip-newline`` (the trainer's tool responses lack their final newline; the corpus
    regenerated on a second machine): the first tokens after a tool response 13x the rest of
    those turns, their largest-|r| tokens crowded there, distances 0-1 hot, 2-3 cold, 4-7 hot
    again, 8-15 cold. The first eight against the next eight decay; the first half of the
    eight against the second did not, and the template went unnamed."""
    found = diagnosis(held_out_store, "tpl-strip-newline").section_dict()
    edges = next(c for c in found["checks"] if c["name"] == "turn_edges")
    e = edges["evidence"]
    rows = {p["distance"]: p["rate_ratio"] for p in e["profile_later"]}
    assert rows["2-3"] < rows["4-7"] and rows["8-15"] < min(rows["0"], rows["4-7"])
    assert e["decays"] and e["top_crowded"] and e["template"]
    assert edges["verdict"] == "fail"
    assert found["cause"]["key"] == "template"
