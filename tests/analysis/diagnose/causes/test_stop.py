"""The cause ``stop`` (``analysis/diagnose/causes/stop.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.diagnose.stores import calibration, stops
from tests.helpers import slow_param
from tests.planted import checks as diagnosed


def test_a_2x_end_of_sequence_fault_is_named_by_the_responses_last_token(ends_store: Path) -> None:
    """2x on the responses' last token: diluted to 1.3x by the turns that end before a tool
    response, it stands at 2.2x (1.8-2.6) alone."""
    ends = diagnosed(ends_store, "stop-2x")["turn_ends"]
    assert ends.verdict == "warn" and ends.evidence.worst.scope == "end of the response"
    assert ends.evidence.worst.last.rate_ratio_ci[0] < 1.5
    assert ends.evidence.worst.response_end.last_vs_before.rate_ratio_ci[0] >= 1.5


@pytest.mark.parametrize("run", ["stop-3x", "stop-100x"])
def test_a_stop_handled_differently_is_named(ends_store: Path, run: str) -> None:
    checks = diagnosed(ends_store, run)
    ends = checks["turn_ends"]
    assert ends.verdict == ("fail" if run == "stop-100x" else "warn")
    assert ends.evidence.worst.last.rate_ratio_ci[0] >= 1.5
    assert ends.evidence.worst.last_vs_before.rate_ratio_ci[0] >= 1.5
    assert ends.evidence.worst.last_tokens > 0
    assert ends.evidence.worst.scope == "every turn"
    final = ends.evidence.worst.response_end
    assert final.tokens == 24 * 32  # one per response
    assert final.last.rate_ratio > ends.evidence.worst.last.rate_ratio  # undiluted
    cause = checks["cause"]
    assert cause.evidence.cause == "stop"
    assert "stop" in cause.next and "end-of-sequence" in cause.next
    local = checks["localized"]
    if local.verdict in stops.ALARM:
        assert "turn_ends check" in local.next


@pytest.mark.parametrize("baseline", [None, slow_param("h-b")])
def test_the_later_turns_beside_the_stop_count_what_is_left_without_its_tokens(
    calibration_store: Path, baseline: str | None
) -> None:
    """The engine's logprob of each response's last token written as 0.0: that token ends the
    last turn, after a tool response, so the later turns are 200x the first as a whole
    (tool_responses fails); without the stop's tokens nothing is left of their excess, so
    they are a runner-up, not a second cause."""
    cause = calibration._cause(calibration_store, "stop-zero-last", baseline)["cause"]
    assert cause["key"] == "stop" and cause["also"] == [], baseline
    later = next(r for r in cause["runner_ups"] if r["key"] == "tool_turns")
    assert later["verdict"] == "fail" and later["share"] > 0.9  # alarmed, on the whole
    assert later["lost"].startswith("without the tokens of stop handling"), later["lost"]
    assert "explains 0%" in later["lost"] or "explains 1%" in later["lost"]
