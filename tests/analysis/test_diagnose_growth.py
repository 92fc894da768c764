"""diagnose on a mismatch that grows over the run against one that switches on at a step: the
steps of a smooth growth also split into a lower and a higher group (the regimes check) and the
localized check finds the late steps, but they follow a rising line at least as closely as two
levels: the cause is the growth, not a code path. A fault from one step on keeps two levels and
stays a code path.

The dumps are tests/planted.py's healthy runs with the mismatch of every model token scaled by
step (``write_scaled``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers import SLOW, slow_param
from tests.planted import Scale, scaled_store
from tests.planted import checks as diagnosed

STEPS = 24
ALARM = ("warn", "fail")


def _growth(factor: float) -> Scale:  # K3 times factor**(step / last step): smooth, geometric
    return lambda row, kv: np.full(len(kv), factor ** (row["step"] / (STEPS - 1)))


def _from_step(factor: float, first: int) -> Scale:  # K3 times factor from one step on
    return lambda row, kv: np.full(len(kv), factor if row["step"] >= first else 1.0)


RUNS = {
    "grows-3x-1": (1, _growth(3.0)),
    "grows-3x-2": (2, _growth(3.0)),
    "grows-10x": (3, _growth(10.0)),
    "switch-3x": (1, _from_step(3.0, 16)),
    "switch-10x": (2, _from_step(10.0, 16)),
    "base": (99, _growth(1.0)),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    slow_only = ("grows-3x-2", "grows-10x", "switch-10x")  # written when the slow tests run
    runs = {name: run for name, run in RUNS.items() if SLOW or name not in slow_only}
    return scaled_store(tmp_path_factory.mktemp("growth"), runs)


@pytest.mark.parametrize("run", ["grows-3x-1", slow_param("grows-3x-2"), slow_param("grows-10x")])
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_a_smooth_growth_is_the_growth_not_a_code_path(
    store: Path, run: str, baseline: str | None
) -> None:
    checks = diagnosed(store, run, baseline)
    assert checks["trend"].verdict in ALARM
    regimes = checks["regimes"]
    assert regimes.verdict in ALARM  # the late steps are higher: true, and said to be a line
    (evidence,) = regimes.evidence["runs"].values()
    assert evidence["smooth_rise"] and "rising line" in regimes.finding
    assert "a growth (the trend check)" in regimes.next and "kernel" not in regimes.next
    if checks["localized"].verdict in ALARM:  # the late steps found by the search: the same
        assert "a growth (the trend check)" in checks["localized"].next
    cause = checks["cause"]
    assert cause.evidence["key"] == "growth"
    assert "regimes" not in cause.evidence["checks"]
    assert "grows as training goes on" in cause.next


@pytest.mark.parametrize("run", ["switch-3x", slow_param("switch-10x")])
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_a_fault_from_one_step_on_stays_a_code_path(
    store: Path, run: str, baseline: str | None
) -> None:
    checks = diagnosed(store, run, baseline)
    regimes = checks["regimes"]
    assert regimes.verdict in ALARM
    (evidence,) = regimes.evidence["runs"].values()
    assert evidence["kind"] == "step change" and "smooth_rise" not in evidence
    assert [int(s) for s in evidence["elevated_steps"]] == list(range(16, STEPS))
    assert checks["cause"].evidence["key"] == "code_path"
    assert "a code path only some steps take" in regimes.next


def test_the_healthy_run_raises_no_alarm(store: Path) -> None:
    checks = diagnosed(store, "base", None)
    assert not [n for n, c in checks.items() if c.verdict in ALARM]


def test_a_switch_the_trend_sees_rising_says_why_it_is_no_growth(store: Path) -> None:
    """From step 16 on at 3x: the fitted line rises (the trend check warns), but two levels fit
    the steps better; the cause says so with both fits rather than calling it a growth."""
    checks = diagnosed(store, "switch-3x", None)
    assert checks["trend"].verdict in ALARM
    cause = checks["cause"]
    assert cause.evidence["key"] == "code_path"
    assert "two levels fit them better than a line" in cause.finding
    assert "a change at a step, not a growth" in cause.finding
