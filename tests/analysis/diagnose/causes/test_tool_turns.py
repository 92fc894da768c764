"""The cause ``tool_turns`` (``analysis/diagnose/causes/tool_turns.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mismatchctl import api
from tests.analysis.diagnose.stores import relative, turns
from tests.helpers import slow_param
from tests.planted import checks as diagnosed


@pytest.mark.parametrize(
    "run",
    ["tool-small", *(pytest.param(r, marks=pytest.mark.slow) for r in ("tool-mid", "tool-loud"))],
)
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_worse_tool_turns_are_not_called_a_code_path(
    relative_store: Path, run: str, baseline: str | None
) -> None:
    """Every token after a tool response 3x, 10x or 64x worse: the long KV positions live in
    the later turns, so localize finds parts by position (`kv_position 32-127`, `turn 1,
    length 32-127`); none is hotter than the later turns as a whole, so they are those turns
    seen by position, and the cause is the tool turns, with their advice."""
    checks = relative._checks(relative_store, run, baseline)
    assert checks["cause"].evidence.cause == "tool_turns", (run, baseline)
    tool = checks["tool_responses"]
    assert tool.verdict in relative.ALARM and tool.evidence.same_probs_excess is True
    assert "fix that path first" not in tool.next
    local = checks["localized"]
    if local.verdict in relative.ALARM:
        assert local.evidence.later_turns is True
        assert "no hotter than the later turns as a whole" in local.finding
        assert "not a code path" in local.next


@pytest.mark.slow
def test_the_later_turns_seen_by_position_are_one_finding(relative_store: Path) -> None:
    """Every token after a tool response 3x worse: the KV positions the later turns fill are
    folded into the later turns' finding (``seen_as``), and the localized check says the hot
    part is among the turns (no code path) instead of that no part is hotter."""
    expl = api.explain("tool-seen", store=relative_store, bootstrap=False).explanation
    (top,) = expl.findings
    assert {"turn_kind": "later"} in [top.where, *top.same_as]
    assert any("kv_position" in w for w in top.seen_as)
    checks = relative._checks(relative_store, "tool-seen")
    local = checks["localized"]
    assert local.verdict == "ok" and "among the turns" in local.finding
    assert checks["cause"].evidence.cause == "tool_turns"


def test_later_turns_found_by_position_alone_still_name_a_cause(turns_store: Path) -> None:
    """KV >= 48 at 3x (seed 2): the localized part is the later turns seen by position (1.8x,
    interval 1.6-2.0) while the later turns as a whole are 1.6x the first, under the
    tool_responses check's 1.75x; the cause was "none" ("nothing localized") beside a warning
    localized check. Now the cause is the tool turns, by the localized check, with advice that
    says a long-context path looks the same."""
    checks = diagnosed(turns_store, "kv-3x-2", None)
    local, tool, cause = checks["localized"], checks["tool_responses"], checks["cause"]
    assert local.verdict in turns.ALARM and local.evidence.later_turns is True
    assert tool.verdict == "ok"
    assert cause.evidence.cause == "tool_turns"
    assert cause.evidence.named.checks == ["localized"]
    assert "kv_position" in cause.next and "turn_kind=later" in cause.next
