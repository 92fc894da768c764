"""diagnose on faults placed among the turns that are not the tool turns' amplification: the
first turns alone hotter (the prompt's path), and a long-context path that lives inside the
later turns (a split-KV kernel taken from KV 48 on: the later turns hold those positions). The
first was passed ("among the turns: the tool_responses check", which only looks for later
turns hotter than the first); the second was named the tool responses (the part found was no
hotter than the later turns as a whole). Now a part is the later turns seen by position only
when, within the later turns, it is not hotter than their other tokens either.

The dumps are tests/planted.py's healthy runs with the mismatch of some model tokens scaled
(``write_scaled``); a uniform excess of every later-turn token stays the tool responses
(test_diagnose_relative.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers import SLOW, slow_param
from tests.planted import Scale, scaled_store
from tests.planted import checks as diagnosed

ALARM = ("warn", "fail")


def _first_turn(factor: float) -> Scale:
    """K3 times ``factor`` on the first turn's model tokens (KV positions 0, 1, ... up to the
    first gap: the tool response)."""

    def scale(row: dict, kv: np.ndarray) -> np.ndarray:
        gaps = np.flatnonzero(np.diff(kv) > 1)
        end = gaps[0] + 1 if len(gaps) else len(kv)
        return np.where(np.arange(len(kv)) < end, factor, 1.0)

    return scale


def _long_kv(factor: float, kv_min: int = 48) -> Scale:
    return lambda row, kv: np.where(kv >= kv_min, factor, 1.0)


RUNS = {
    "first-3x": (1, _first_turn(3.0)),
    "first-10x": (2, _first_turn(10.0)),
    "kv-10x-1": (1, _long_kv(10.0)),
    "kv-10x-2": (2, _long_kv(10.0)),
    "kv-3x-2": (2, _long_kv(3.0)),
    "kv-100x": (3, _long_kv(100.0)),
    "healthy": (3, _first_turn(1.0)),
    "base": (99, _first_turn(1.0)),
}
# the runs the fast tests diagnose; the louder and second ones are written for the slow tests
FAST = ("first-3x", "kv-10x-1", "kv-3x-2", "healthy", "base")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = RUNS if SLOW else {name: RUNS[name] for name in FAST}
    return scaled_store(tmp_path_factory.mktemp("turns"), runs)


@pytest.mark.parametrize("run", ["first-3x", slow_param("first-10x")])
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_hotter_first_turns_are_the_prompts_path(
    store: Path, run: str, baseline: str | None
) -> None:
    checks = diagnosed(store, run, baseline)
    local, cause = checks["localized"], checks["cause"]
    assert local.verdict in ALARM
    (evidence,) = local.evidence["runs"].values()
    assert evidence["first_turns"] is True
    top = evidence["code_path_findings"][0]["where"]
    assert top.get("turn") == "0" or top.get("turn_kind") == "first"
    assert cause.evidence["key"] == "code_path"
    assert cause.evidence["variant"].startswith("the first turns")
    assert "prompt" in cause.next and "prompt" in local.next
    # the later turns are colder, not hotter: the tool check stays quiet
    assert checks["tool_responses"].verdict == "ok"
    assert checks["tool_responses"].evidence["same_probs_ratio_ci"][1] < 1


@pytest.mark.parametrize("run", ["kv-10x-1", slow_param("kv-10x-2"), slow_param("kv-100x")])
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_a_long_context_path_inside_the_later_turns_is_a_code_path(
    store: Path, run: str, baseline: str | None
) -> None:
    checks = diagnosed(store, run, baseline)
    local, cause = checks["localized"], checks["cause"]
    assert local.verdict in ALARM
    assert local.evidence["later_turns"] is False
    (evidence,) = local.evidence["runs"].values()
    assert "first_turns" not in evidence
    assert any("kv_position" in f["where"] for f in evidence["code_path_findings"])
    # within the later turns, their long KV positions (the fault's) stand out: at 100x the
    # search's part was askew (some steps, a length), the later turns' own KV contrast is not
    inside = evidence["within_later_turns"]
    assert "kv_position" in inside["where"] and inside["rate_ratio_ci"][0] >= 1.5
    assert cause.evidence["key"] == "code_path", cause.finding
    assert "attention backend" in cause.next
    # the later turns are hotter as a whole (they hold the long positions): that check fires
    # too, and defers to the code path
    assert checks["tool_responses"].verdict in ALARM
    assert "fix that path first" in checks["tool_responses"].next
    assert "tool_responses" in cause.evidence["checks"]  # its excess is the path's
    assert cause.verdict == checks["tool_responses"].verdict or cause.verdict == "fail"


@pytest.mark.parametrize("baseline", [None, "base"])
def test_a_healthy_run_has_no_turn_fault(store: Path, baseline: str | None) -> None:
    checks = diagnosed(store, "healthy", baseline)
    assert checks["localized"].verdict == "ok"
    assert checks["cause"].evidence["key"] == "none"
    assert all(c.verdict not in ALARM for c in checks.values())


def test_later_turns_found_by_position_alone_still_name_a_cause(store: Path) -> None:
    """KV >= 48 at 3x (seed 2): the localized part is the later turns seen by position (1.8x,
    interval 1.6-2.0) while the later turns as a whole are 1.6x the first, under the
    tool_responses check's 1.75x; the cause was "none" ("nothing localized") beside a warning
    localized check. Now the cause is the tool turns, by the localized check, with advice that
    says a long-context path looks the same."""
    checks = diagnosed(store, "kv-3x-2", None)
    local, tool, cause = checks["localized"], checks["tool_responses"], checks["cause"]
    assert local.verdict in ALARM and local.evidence["later_turns"] is True
    assert tool.verdict == "ok"
    assert cause.evidence["key"] == "tool_turns"
    assert cause.evidence["checks"] == ["localized"]
    assert "kv_position" in cause.next and "turn_kind=later" in cause.next


@pytest.mark.parametrize("run", [r if r in FAST else slow_param(r) for r in sorted(RUNS)])
def test_an_alarm_always_comes_with_a_cause(store: Path, run: str) -> None:
    checks = diagnosed(store, run, None)
    alarms = [c.name for c in checks.values() if c.verdict in ALARM and c.name != "cause"]
    if alarms:
        assert checks["cause"].evidence["key"] != "none", alarms
