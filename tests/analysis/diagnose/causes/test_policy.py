"""The cause ``policy`` (``analysis/diagnose/causes/policy.py``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest

from mismatchctl.analysis.diagnose.causes import policy
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.stats import assign_bins
from mismatchctl.stats.hot_sequences import hot_sequence_state
from tests.analysis.diagnose.stores import leaning, relative
from tests.planted import checks as diagnosed
from tests.planted import diagnosis
from tests.stats.test_sign_coherence import EDGES, _truncated


@pytest.mark.parametrize("baseline", [None, "ref-b"])
def test_a_run_one_step_behind_is_named_the_policy(
    sample_runs_store: Path, baseline: str | None
) -> None:
    checks = diagnosed(sample_runs_store, "stale-subtle", baseline)
    signs = checks["policy_signs"]
    assert signs.verdict in leaning.ALARM
    assert signs.evidence.worst.signs.dispersion > 2 and signs.evidence.worst.signs.p_value < 1e-20
    assert checks["staleness"].verdict == "ok"  # no version column; its tag says weight_lag=0
    cause = checks["cause"]
    assert cause.evidence.cause == "policy" and "policy_signs" in cause.evidence.named.checks
    assert "weight versions" in cause.next
    if baseline:  # the baseline check sees the excess too, and the cause keeps it
        assert "baseline" in cause.evidence.named.checks


@pytest.mark.parametrize("run", ["lean-1", "lean-2"])
def test_planted_leaning_responses_are_the_policy(leaning_store: Path, run: str) -> None:
    checks = diagnosed(leaning_store, run)
    assert checks["policy_signs"].verdict in leaning.ALARM
    assert checks["cause"].evidence.cause == "policy"


def test_a_policy_mismatch_without_baseline_is_not_blamed_on_a_code_path(
    relative_store: Path,
) -> None:
    for run in ("policy-small", "policy-loud"):
        cause = relative._checks(relative_store, run)["cause"].evidence.cause
        assert cause in ("none", "unexplained"), (run, cause)
    loud = relative._checks(relative_store, "policy-loud")["cause"]
    assert loud.verdict == "warn" and "--baseline" in loud.next


@pytest.mark.parametrize(("lean", "leans"), [(0.0, False), (1.0, True)])
def test_a_lean_above_a_truncations_reach(lean: float, leans: bool) -> None:
    """Responses cut by a truncation with shares of their own lean about zero; above the
    healthy noise only another policy's lean shows, and it is the policy's, with the sign
    test's thresholds."""
    lr, lt, seq, turn, step = _truncated(5, lean)
    parts = hot_sequence_state(
        lr, lt, seq, turn, step, assign_bins(np.exp(lr), EDGES), len(EDGES) - 1
    )
    ctx = cast(Context, SimpleNamespace(state=SimpleNamespace(hot_sequences=parts)))
    found = policy.lean_above_truncation(ctx)
    assert (found is not None) is leans
    if found is not None:
        assert found.verdict in ("warn", "fail") and found.checks == ("policy_signs",)
        assert "above the healthy noise" in found.because and "400 sequences" in found.because


def _far(mean: float, rho: float, line: float | None = None) -> Context:
    """The ``offset`` check alarmed at mean ``r`` = ``mean`` and the ``top_p`` check measured the
    mean ratio ``rho``; ``line``: the ``temperature`` check alarmed too, its line explaining
    that share of r's variance."""
    from mismatchctl.analysis.diagnose.check import Check
    from mismatchctl.analysis.diagnose.checks import offset, temperature, token_shift, top_p

    o = offset.Evidence(log_ratio_mean=mean, log_ratio_se=0.01, log_ratio_z=mean / 0.01,
                        negative_share=0.67, ratio_mean=rho)  # fmt: skip
    t = top_p.Evidence(ratio_mean=rho, ratio_se=0.01, ratio_z=0.4, negative_share=0.67)
    slope = temperature.Evidence(slope=1.2, intercept=0.0, diff_r2=line or 0.0,
                                 implied_temperature=1.2)  # fmt: skip
    lined = "ok" if line is None else "warn"
    found = {
        offset: Check("semantic", "offset", "", "fail", "", o, ""),
        top_p: Check("semantic", "top_p", "", "ok", "", t, ""),
        temperature: Check("semantic", "temperature", "", lined, "", slope, ""),
        token_shift: Check("semantic", "token_shift", "", "ok", "", None, ""),
    }
    return cast(Context, SimpleNamespace(result=lambda m: found.get(m)))


@pytest.mark.parametrize(
    ("mean", "rho", "line", "far"),
    [(-0.883, 1.004, None, True), (-0.0416, 0.9847, None, False),
     (-0.0794, 0.949, None, False), (-1.28, 0.977, 0.076, True), (-0.125, 1.004, 0.54, False)],
)  # fmt: skip
def test_a_mean_that_is_the_kl_of_two_distributions_is_another_function(
    mean: float, rho: float, line: float | None, far: bool
) -> None:
    """``f-pol-early`` (a pre-training checkpoint on the Llama family: mean r -0.883, mean ratio
    1.004; with 8192 tokens -1.28, 0.977 and a faint line of 7.6% of r's variance) is another
    function at every token; ``combo-topp-stale`` (0.9847: a truncation's deficit) and
    ``sem-badwords-loud`` (0.949) keep their shift, and a line of 54% of r's variance is a
    temperature's (``f-sem-temp-loud``)."""
    from mismatchctl.analysis.diagnose.causes import semantics
    from mismatchctl.analysis.diagnose.checks import offset

    ctx = _far(mean, rho, line)
    assert semantics.kl_only(ctx) is (abs(rho - 1) < offset.T.SHIFT_BEYOND_KL * abs(mean))
    found = policy.far_apart(ctx)
    assert (found is not None) is far
    assert semantics.far_line(ctx) is (far and line is not None)
    if found is not None:
        assert found.verdict == "fail" and found.checks == ("offset",)
        assert found.variant == "another function at every token"
        assert "KL divergence" in found.because


def test_a_pretraining_checkpoint_on_another_family_is_another_function(
    held_out_store: Path,
) -> None:
    """``f-pol-early`` (the Llama family over a 1024-token BPE, a pre-training checkpoint served,
    3130x its healthy run): its responses do not lean, and its mean r is the two sides' KL
    (the mean ratio 1): the offset check says so, and the policy is named, not a shift."""
    found = diagnosis(held_out_store, "f-pol-early").section_dict()
    cause = found["cause"]
    assert cause["key"] == "policy" and cause["variant"] == policy.FAR_APART
    signs = next(c for c in found["checks"] if c["name"] == "policy_signs")
    assert signs["verdict"] == "ok"
    off = next(c for c in found["checks"] if c["name"] == "offset")
    assert off["verdict"] == "fail" and "KL divergence, not a shift" in off["finding"]
    assert "semantics" not in {r["key"] for r in cause["runner_ups"] if r["verdict"] != "ok"}
