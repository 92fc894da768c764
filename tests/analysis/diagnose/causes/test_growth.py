"""The cause ``growth`` (``analysis/diagnose/causes/growth.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.diagnose.stores import growth
from tests.helpers import slow_param
from tests.planted import checks as diagnosed


@pytest.mark.parametrize("run", ["grows-3x-1", slow_param("grows-3x-2"), slow_param("grows-10x")])
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_a_smooth_growth_is_the_growth_not_a_code_path(
    growth_store: Path, run: str, baseline: str | None
) -> None:
    checks = diagnosed(growth_store, run, baseline)
    assert checks["trend"].verdict in growth.ALARM
    regimes = checks["regimes"]
    assert regimes.verdict in growth.ALARM  # the late steps are higher: true, and said to be a line
    (evidence,) = regimes.evidence.runs.values()
    assert evidence.smooth_rise and "rising line" in regimes.finding
    assert "a growth (the trend check)" in regimes.next and "kernel" not in regimes.next
    if checks["localized"].verdict in growth.ALARM:  # the late steps found by the search: the same
        assert "a growth (the trend check)" in checks["localized"].next
    cause = checks["cause"]
    assert cause.evidence.cause == "growth"
    assert "regimes" not in cause.evidence.named.checks
    assert "grows as training goes on" in cause.next
