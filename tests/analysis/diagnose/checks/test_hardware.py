"""The ``hardware`` check (``analysis/diagnose/checks/hardware.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.diagnose.stores import gpus, planted_causes, relative
from tests.planted import diagnosis


def test_most_gpus_hot_against_one_is_the_hardware(four_gpus_store: Path) -> None:
    """Each hot gpu is at the median of the others: the hottest against the rest sees nothing;
    the hot group against the cold gpu does."""
    checks = gpus._checks(four_gpus_store, "three-hot")
    hardware = checks["hardware"]
    assert hardware.verdict == "warn"
    assert set(hardware.evidence.hot_gpus) == {"A100", "L20", "A10"}
    assert max(hardware.evidence.factor_over_others_median.values()) < 1.75
    lo, hi = hardware.evidence.rate_ratio_vs_rest_ci
    assert 2.0 < lo < 3.0 < hi < 4.5
    assert "that of H20" in hardware.finding
    assert checks["cause"].evidence.cause == "hardware"


def test_four_healthy_gpus_raise_no_alarm(four_gpus_store: Path) -> None:
    checks = gpus._checks(four_gpus_store, "four-healthy")
    assert checks["hardware"].verdict == "ok" and checks["hardware"].evidence.hot_gpus is None
    assert checks["cause"].evidence.cause == "none"


@pytest.mark.parametrize("run", ["gpu-small", "gpu-loud"])
def test_one_gpu_is_named_as_hardware(relative_store: Path, run: str) -> None:
    checks = relative._checks(relative_store, run)
    assert checks["cause"].evidence.cause == "hardware"
    assert "A100" in checks["cause"].finding
    assert "importance" not in (checks["cause"].next or "")
    if run == "gpu-loud":
        assert checks["hardware"].verdict == "fail"


def test_fires_on_its_planted_cause_only(verdicts: dict) -> None:
    planted_causes.fires_on_its_cause_only("hardware", verdicts)


def test_evidence_names_the_gpu(planted_store: Path) -> None:
    checks = {c.name: c for c in diagnosis(planted_store, "gpu").checks}
    assert "A100" in checks["hardware"].finding
    assert checks["hardware"].evidence.severe.concentrated_on == "A100"
    assert "disable_cascade_attn" in checks["hardware"].next
