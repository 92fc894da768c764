"""The ``tool_responses`` check (``analysis/diagnose/checks/tool_responses.py``)."""

from __future__ import annotations

from pathlib import Path

from mismatchctl.analysis.diagnose.checks.tool_responses import T
from mismatchctl.analysis.diagnose.levels import TOOL_CI_LOW
from tests.analysis.diagnose.stores import planted_causes, relative
from tests.planted import diagnosis


def test_tool_turns_sampling_more_unlikely_tokens_is_told_from_worse_tokens(
    relative_store: Path,
) -> None:
    """Later turns 2.5x the first ones because they sample more low-probability tokens (the same
    noise per token): the check finds them no worse at the same token probabilities and says
    so, with no alarm (one step of a healthy run's mix reaches that far). Later turns whose
    every token is worse (``tool``) keep their ratio at the same probabilities, warn, and the
    advice does not blame the token mix."""
    checks = relative._checks(relative_store, "toolmix")
    tool = checks["tool_responses"]
    assert tool.verdict == "ok"
    assert tool.evidence.later_first_ratio > 2
    assert tool.evidence.same_probs_ratio_ci[0] < 1.25
    assert tool.evidence.same_probs_excess is False
    assert "at the same token probabilities" in tool.finding
    assert "their mix of token probabilities, not a rate" in tool.finding
    assert checks["cause"].evidence.cause != "tool_turns"
    loud = relative._checks(relative_store, "tool-loud")["tool_responses"]
    assert loud.evidence.same_probs_excess is True
    assert loud.evidence.same_probs_ratio_ci[0] > 5
    assert "sample more low-probability tokens" not in (loud.next or "")


def test_fires_on_its_planted_cause_only(verdicts: dict) -> None:
    planted_causes.fires_on_its_cause_only("tool_responses", verdicts)


def test_a_few_heavy_responses_are_not_the_turns(held_out_store: Path) -> None:
    """``mb-h-b``: a healthy mixture of experts scored by a bf16 trainer (``family.py --moe
    --trainer bf16``, its routes left out). Its later turns are 2.0x the first (95% CI
    1.3-2.9), which warned; without its four heaviest responses (2% of 192, a third of the
    later turns' K3) they are 1.3x: no warning, the finding says why."""
    found = diagnosis(held_out_store, "mb-h-b").section_dict()
    tool = next(c for c in found["checks"] if c["name"] == "tool_responses")
    e = tool["evidence"]
    assert e["later_first_ratio"] >= T.TOOL_RATIO_WARN
    assert e["later_first_ratio_ci"][0] >= TOOL_CI_LOW  # the interval alone would warn
    assert e["without_heaviest"] < T.TOOL_RATIO_WARN and tool["verdict"] == "ok"
    assert "without the 4 heaviest responses" in tool["finding"]
    assert found["verdict"] == "ok" and found["cause"]["key"] == "none"


def test_one_step_of_a_healthy_run_whose_mix_moved_is_no_alarm(held_out_store: Path) -> None:
    """``c3-h-b-s1``: the first step of ``h-b`` of the calibration corpus drawn on a third
    machine. Its later turns are 2.3x the first (95% CI 1.5-3.6), which warned and named the
    turns after tool responses; at the same token probabilities they are 1.3x (95% CI 0.84-2.1):
    the step's mix, no rate. No alarm, the finding says why."""
    found = diagnosis(held_out_store, "c3-h-b-s1").section_dict()
    tool = next(c for c in found["checks"] if c["name"] == "tool_responses")
    e = tool["evidence"]
    assert e["later_first_ratio"] >= T.TOOL_RATIO_WARN
    assert e["later_first_ratio_ci"][0] >= TOOL_CI_LOW  # the interval alone would warn
    assert e["same_probs_excess"] is False and tool["verdict"] == "ok"
    assert "mix of token probabilities" in tool["finding"]
    assert found["verdict"] == "ok"
