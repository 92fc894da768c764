"""The cause ``stop`` (``analysis/diagnose/causes/stop.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from mismatchctl.analysis.diagnose.causes import stop
from mismatchctl.analysis.diagnose.checks import turn_ends
from tests.analysis.diagnose.stores import calibration, stops
from tests.helpers import slow_param
from tests.planted import checks as diagnosed
from tests.planted import diagnosis


def test_a_stop_handled_differently_is_named(ends_store: Path) -> None:
    checks = diagnosed(ends_store, "stop-100x")
    ends = checks["turn_ends"]
    assert ends.verdict == "fail"
    assert ends.evidence.worst.last.rate_ratio_ci[0] >= 1.5
    assert ends.evidence.worst.last_vs_before.rate_ratio >= turn_ends.T.STOP_SHARP
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


def test_a_stop_holding_a_parts_excess_is_named_before_the_part(held_out_store: Path) -> None:
    """``stop-unsampled`` (the trainer scores a stop byte appended to the responses cut at the
    length limit; the corpus regenerated on a second machine): every hot end lies at turn
    positions 16-63, a part holding the excess as the ends do; the part ranked first by a
    thousandth. The ends alone hold ``ECHO`` of its excess or more at thousands of times
    their neighbours: the stop is named, the part is its finding seen from elsewhere, with
    nothing left of its excess without the ends' tokens (``stop.WITHIN``)."""
    found = diagnosis(held_out_store, "stop-unsampled").section_dict()
    cause = found["cause"]
    assert cause["key"] == "stop" and cause["also"] == []
    ends = next(c for c in found["checks"] if c["name"] == "turn_ends")
    assert ends["evidence"]["last_vs_before"]["rate_ratio"] > 100 * turn_ends.T.STOP_SHARP
    part = next(r for r in cause["runner_ups"] if r["key"] == "code_path")
    assert part["verdict"] == "fail" and part["share"] >= cause["share"]  # ranked first alone
    assert cause["share"] >= stop.ECHO * part["share"]
    assert part["lost"].startswith("without the tokens of stop handling"), part["lost"]


def test_the_ends_of_small_decode_batches_are_not_the_stop(held_out_store: Path) -> None:
    """``cp-batchvar-subtle`` (split-K linear layers that drop the K tail in decode batches
    under 16; a second machine's draw, 1.49x its baseline): the last tokens of the longest
    responses are decoded in the smallest batches, so the responses' last token is 16x the
    rest and 8.8x the seven before it, under ``STOP_SHARP``: it was named the stop. The stop
    is not named; the later turns, where the long responses end, were named (the tool turns)
    until the ``tool_responses`` check asked their ratio to hold without the heaviest
    responses (four of them carried it: ``HEAVY_SHARE``), and now before that by their rate at
    the same token probabilities, whose interval reaches under 1.25x: the run, 1.49x its
    baseline, is unseen."""
    found = diagnosis(held_out_store, "cp-batchvar-subtle").section_dict()
    ends = next(c for c in found["checks"] if c["name"] == "turn_ends")
    under = f"under {turn_ends.T.STOP_SHARP:g}x the tokens just before them"
    assert ends["verdict"] == "ok" and under in ends["finding"]
    end = ends["evidence"]["response_end"]
    assert end["last_vs_before"]["rate_ratio_ci"][0] >= 1.5  # hot against its neighbours...
    assert end["last_vs_before"]["rate_ratio"] < turn_ends.T.STOP_SHARP  # ...not a stop's
    assert found["cause"]["key"] != "stop"
    tool = next(c for c in found["checks"] if c["name"] == "tool_responses")
    assert tool["verdict"] == "ok"  # its later turns hold no rate (1.7x, the same tokens'
    assert "mix of token probabilities" in tool["finding"]  # interval under 1.25x): no alarm


def test_the_stop_goes_first_only_over_a_part_its_ends_hold() -> None:
    """``over_part``: the stop alarmed and holding ``ECHO`` of a part's excess or more goes
    before the part; a part that keeps more than the stop's tokens hold, a first cause of every
    token, or a stop that did not alarm, keep the order."""
    from mismatchctl.analysis.diagnose.causes import code_path, policy
    from mismatchctl.analysis.diagnose.causes.hypothesis import CauseModule, Support, Weighed

    def weighed(cause: object, verdict: str, share: float) -> Weighed:
        return Weighed(cast(CauseModule, cause), Support(verdict, share, "", ()), share)

    part, ends = weighed(code_path, "fail", 0.998), weighed(stop, "fail", 0.997)
    assert stop.over_part(part, [part, ends]) is ends
    wide = weighed(code_path, "fail", 0.9)
    assert stop.over_part(wide, [wide, weighed(stop, "warn", 0.5)]) is None  # the path keeps more
    lean = weighed(policy, "fail", 0.998)
    assert stop.over_part(lean, [lean, ends]) is None  # every token: no part to hold
    assert stop.over_part(part, [part]) is None  # the stop did not alarm (not weighed as alarmed)
