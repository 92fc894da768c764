"""The cause ``stop`` (``analysis/diagnose/causes/stop.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.diagnose.stores import stops
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
