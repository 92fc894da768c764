"""The ``baseline`` check (``analysis/diagnose/checks/baseline.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.diagnose.stores import gpus, relative


def test_another_gpu_at_the_baseline_level_raises_no_alarm(one_gpu_each_store: Path) -> None:
    checks = gpus._against(one_gpu_each_store, "a100-same", "base-h20")
    assert checks["baseline"].verdict == "ok"
    assert checks["cause"].evidence.cause == "none"


@pytest.mark.parametrize("baseline", [None, "base"])
def test_improvement_is_reported_as_such(relative_store: Path, baseline: str | None) -> None:
    checks = relative._checks(relative_store, "improved", baseline)
    assert relative._alarms(checks) == {}
    if baseline:
        assert checks["baseline"].verdict == "ok"
        assert "an improvement" in checks["baseline"].finding
        assert checks["baseline"].evidence.rate_ratio_ci[1] < 1


def test_baseline_cli_and_json(relative_store: Path) -> None:
    from tests.helpers import cli

    ran = cli(
        "diagnose",
        "policy-loud",
        "--baseline",
        "base",
        "--store",
        str(relative_store),
        "--json",
        "-",
    )
    assert ran.code == 3
    import json

    out = json.loads(ran.out)
    assert out["diagnosis"]["baseline"] == "base"
    names = [c["name"] for c in out["diagnosis"]["checks"]]
    assert {"baseline", "localized", "regimes", "cause", "objective"} <= set(names)
    bad = cli("diagnose", "policy-loud", "--baseline", "nope", "--store", str(relative_store))
    assert bad.code == 1 and "`nope`" in bad.err and "Hint:" in bad.err
