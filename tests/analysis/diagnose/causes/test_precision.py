"""The cause ``precision`` (``analysis/diagnose/causes/precision.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.diagnose.stores import gpus, relative
from tests.helpers import slow_param


def test_the_same_excess_on_the_same_gpu_is_not_the_hardware(one_gpu_each_store: Path) -> None:
    """The same uniform excess (each token's logits perturbed on its own) on the baseline's gpu:
    a less exact path, not another gpu generation."""
    checks = gpus._against(one_gpu_each_store, "h20-3x", "base-h20")
    assert checks["cause"].evidence.cause == "precision"


def test_a_uniform_excess_without_a_lean_is_the_precision_against_a_baseline(
    relative_store: Path,
) -> None:
    """The planted `policy` perturbs each token's logits independently: a uniform excess over
    the baseline whose responses do not lean, which is what a less exact numeric path gives
    (a physical policy mismatch leans whole responses: causes/test_policy.py). The advice
    says that a faint policy mismatch looks the same."""
    for run in ("policy-small", "policy-loud"):
        checks = relative._checks(relative_store, run, "base")
        assert checks["baseline"].verdict in relative.ALARM, run
        assert checks["baseline"].evidence.excess_shape == "uniform", run
        assert checks["policy_signs"].verdict == "ok", run
        assert checks["cause"].evidence.cause == "precision", run
        assert "checkpoint versions" in checks["cause"].next
        assert "localized" not in relative._alarms(checks)


@pytest.mark.parametrize("run", ["lowprob-small", slow_param("lowprob-loud")])
def test_an_excess_in_the_rare_tokens_is_not_called_a_policy(
    relative_store: Path, run: str
) -> None:
    """Worse than the baseline, spread evenly over steps, gpus and turns, but the probability
    bins with enough tokens to test are at the baseline's rate: the excess sits in the rare
    tokens' bins (too small to test one by one), not in every token as a policy's would."""
    checks = relative._checks(relative_store, run, "base")
    base = checks["baseline"]
    assert base.verdict in relative.ALARM
    assert base.evidence.excess_shape == "concentrated"
    assert base.evidence.concentrated_in == "bin"
    assert "bin is not uniform" in base.finding and "too small to test" in base.finding
    assert checks["cause"].evidence.cause == "precision"
    assert "unlikely" in checks["cause"].next and "weight" not in checks["cause"].next
    # and on its own, without the baseline: 0.3% of the tokens hold 40% (2x) or most (20x) of
    # the K3 mass
    alone = relative._checks(relative_store, run)
    assert alone["low_probability"].verdict in relative.ALARM
    assert alone["low_probability"].evidence.kl_share > 0.3
    assert alone["cause"].evidence.cause == "precision"
