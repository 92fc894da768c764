"""The ``policy_signs`` check (``analysis/diagnose/checks/policy_signs.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mismatchctl.analysis.diagnose.checks.policy_signs import T, _judge, base_gate, length_gate
from mismatchctl.stats.sign_coherence import SignCoherence
from tests.helpers import slow_param
from tests.planted import checks as diagnosed
from tests.planted import diagnosis


@pytest.mark.parametrize(
    "run", ["ref", "faulty-attn-subtle", slow_param("ref-b"), slow_param("improved")]
)
def test_numeric_mismatch_does_not_lean(sample_runs_store: Path, run: str) -> None:
    signs = diagnosed(sample_runs_store, run)["policy_signs"]
    assert signs.verdict == "ok"
    assert signs.evidence.worst.signs.dispersion < 1.3


@pytest.mark.parametrize("run", ["even", "loud"])
def test_independent_noise_is_not_a_policy(leaning_store: Path, run: str) -> None:
    signs = diagnosed(leaning_store, run)["policy_signs"]
    assert signs.verdict == "ok" and signs.evidence.worst.signs.dispersion < 1.2


@pytest.mark.parametrize(
    ("baseline", "verdict"), [(None, "ok"), ("even", "ok"), ("quieter", "warn")]
)
def test_a_faint_lean_warns_only_over_a_baseline_it_exceeds(
    leaning_store: Path, baseline: str | None, verdict: str
) -> None:
    """A lean between the two gates is within a healthy run's noise alone (held-out healthy
    runs reach 1.57), and the policy's evidence over a baseline the run exceeds."""
    checks = diagnosed(leaning_store, "lean-faint", baseline)
    signs = checks["policy_signs"]
    dispersion = signs.evidence.worst.signs.dispersion
    assert T.SIGN_DISPERSION_WARN < dispersion < T.SIGN_DISPERSION_ALONE
    assert signs.evidence.worst.signs.p_value < T.SIGN_ALPHA
    assert checks["baseline"].verdict == ("warn" if baseline == "quieter" else
                                          "n/a" if baseline is None else "ok")  # fmt: skip
    assert signs.verdict == verdict
    assert (checks["cause"].evidence.cause == "policy") is (verdict == "warn")


def test_the_gates_grow_with_long_responses() -> None:
    """Up to ``LENGTH_SCALE`` tokens a response the gates are the calibrated ones; beyond, their
    excess over 1 grows with the length, as a lean that lasts along a response grows it."""
    for gate in (T.SIGN_DISPERSION_WARN, T.SIGN_DISPERSION_ALONE, T.SIGN_DISPERSION_FAIL):
        assert length_gate(gate, 44.0) == gate == length_gate(gate, T.LENGTH_SCALE)
        assert length_gate(gate, float("nan")) == gate
        assert length_gate(gate, 2 * T.LENGTH_SCALE) == pytest.approx(2 * gate - 1)
    # a healthy run of the sample model at 223 tokens a response leans 1.23-1.32
    assert length_gate(T.SIGN_DISPERSION_ALONE, 223.0) > 2.5


def _signs(dispersion: float, mean_tokens: float) -> SignCoherence:
    return SignCoherence(192, dispersion, 1e-9, 0.01, mean_tokens)


def test_over_a_baseline_of_long_responses_its_own_lean_sets_the_gate() -> None:
    """Beyond ``LENGTH_SCALE`` tokens, over a baseline of responses at least half as long, a
    lean warns from the baseline's own plus ``BASE_MARGIN`` (the family's Llama at 680 tokens:
    healthy 1.00-1.06, a step behind 1.60, where the scaled gate asks 4.4), within the
    calibrated gate and the scaled one; short responses, a missing or a much shorter baseline
    keep the scaled gate."""
    warn = T.SIGN_DISPERSION_WARN
    long_run, healthy = _signs(1.60, 680.0), _signs(0.95, 689.0)
    assert base_gate(warn, long_run, healthy) == pytest.approx(warn)  # 1.45: the floor 1.5
    assert base_gate(warn, long_run, _signs(1.02, 689.0)) == pytest.approx(1.52)
    assert base_gate(warn, long_run, _signs(1.4, 689.0)) == pytest.approx(1.4 + T.BASE_MARGIN)
    assert base_gate(warn, long_run, _signs(9.0, 689.0)) == length_gate(warn, 680.0)  # capped
    assert base_gate(warn, _signs(1.6, 90.0), healthy) is None  # within LENGTH_SCALE
    assert base_gate(warn, long_run, None) is None
    short = _signs(1.0, T.BASE_LENGTH_SHARE * 680.0 - 1)
    assert base_gate(warn, long_run, short) is None
    verdict, finding, _ = _judge(long_run, warn, healthy)
    assert verdict == "warn" and "lean 0.95x by their numerics alone" in finding
    assert _judge(long_run, warn, None)[0] == "ok"  # the scaled gate: 4.4 at 680 tokens


def test_a_healthy_run_that_leans_as_a_step_behind_raises_no_alarm(held_out_store: Path) -> None:
    """Two healthy runs of the deep model trained anew (seed 13, temperature 0.6, loaders b
    and c: docs/diagnose.md "Held-out check, seed 13"): `h-deep-t06-b`'s responses lean 1.57
    (p 8e-7), where a step behind leans 1.59-1.66; it warned `policy` at the first gate (1.5).
    Alone, and against the other (which it does not exceed), nothing alarms."""
    for baseline in (None, "h-deep-t06"):
        found = diagnosis(held_out_store, "h-deep-t06-b", baseline).section_dict()
        signs = next(c for c in found["checks"] if c["name"] == "policy_signs")
        lean = signs["evidence"]  # one run: its own sign coherence, flat
        assert T.SIGN_DISPERSION_WARN < lean["dispersion"] < T.SIGN_DISPERSION_ALONE
        assert lean["p_value"] < T.SIGN_ALPHA
        assert signs["verdict"] == "ok"
        assert found["verdict"] == "ok" and found["cause"]["key"] == "none", baseline
