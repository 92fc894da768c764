"""The ``staleness`` check (``analysis/diagnose/checks/staleness.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import mismatchctl
from mismatchctl import api
from tests.analysis.diagnose.stores import planted_causes, relative
from tests.helpers import slow_param
from tests.planted import Plan, write


def test_staleness_not_applicable_without_versions(store: Path, tmp_path: Path) -> None:
    path = write(Plan("clean", steps=3, per_step=8), tmp_path / "x.parquet", weight_version=False)
    mismatchctl.ingest([path], run="x", store=store)
    checks = {c.name: c for c in api.diagnose("x").checks}
    assert checks["staleness"].verdict == "n/a"
    assert "weight_lag" in checks["staleness"].next
    for name in ("spikes", "regimes", "trend", "spiral"):  # 3 steps: too few for a trajectory
        assert checks[name].verdict == "n/a", name


def test_staleness_without_fresh_rollouts_is_judged_on_its_band(tmp_path) -> None:
    """Every rollout one version behind (the sample stale-weights run): no lag-0 baseline, and a
    vllm_kl in the high band fails the check instead of reading as fine."""
    from pathlib import Path

    import mismatchctl

    runs = Path(__file__).parents[4] / "sample_data" / "runs" / "stale-weights"
    mismatchctl.ingest([runs], run="stale", store=tmp_path / "s")
    check = next(
        c
        for c in mismatchctl.diagnose("stale", store=tmp_path / "s").checks
        if c.name == "staleness"
    )
    assert check.verdict == "fail"
    assert check.finding.startswith("every rollout came from older weights (lag up to 1,")


@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_faint_stale_weights_are_named(relative_store: Path, baseline: str | None) -> None:
    """A third of the rollouts one version behind at twice the mismatch of the current ones
    (the run 1.3x a healthy one): named, with the weight-lag remedy."""
    checks = relative._checks(relative_store, "stale-faint", baseline)
    stale = checks["staleness"]
    assert stale.verdict == "warn"
    assert 1.5 < stale.evidence.factor.factor < 3 and stale.evidence.factor.factor_ci[0] > 1.2
    assert checks["cause"].evidence.cause == "policy"
    assert "stale weights" in checks["cause"].finding


@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_a_weight_lag_that_costs_nothing_raises_no_alarm(
    relative_store: Path, baseline: str | None
) -> None:
    checks = relative._checks(relative_store, "stale-even", baseline)
    stale = checks["staleness"]
    assert stale.evidence.lags[1].sequences > 200  # a lag there is
    assert stale.verdict == "ok" and stale.evidence.factor.factor_ci[0] < 1.2
    assert relative._alarms(checks) == {}
    assert checks["cause"].evidence.cause == "none"


def test_a_weight_lag_tag_names_stale_weights_however_small(relative_store: Path) -> None:
    checks = relative._checks(relative_store, "lagged-small")
    assert checks["staleness"].verdict in relative.ALARM
    assert checks["cause"].evidence.cause == "policy"
    assert "weight sync" in checks["cause"].next


def test_fires_on_its_planted_cause_only(verdicts: dict) -> None:
    planted_causes.fires_on_its_cause_only("staleness", verdicts)
