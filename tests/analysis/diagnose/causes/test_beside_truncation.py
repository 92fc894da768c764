"""What stands beside a truncation over a baseline (``analysis/diagnose/causes/
beside_truncation.py``): the tail above the healthy noise, which a truncation leaves emptier
than the noise does and another cause fills, and the lean of the responses there, on runs of the
5-layer model of the second machine's corpus (their first five steps, ``tests/data/held_out``)
and the committed truncations."""

from __future__ import annotations

from pathlib import Path

import pytest

from mismatchctl.analysis.diagnose.causes import beside_truncation
from tests.analysis.diagnose.stores import calibration
from tests.helpers import slow_param


def test_weights_behind_beside_top_p_are_named_from_the_filled_tail(held_out_store: Path) -> None:
    """``combo-topp-stale-mid`` over ``h-mid-a`` (top-p 0.98 and weights a checkpoint behind):
    the whole run's sign test reads few positive signs beside the truncation's shift, and the
    tail test alone leans 1.39 (p 2.6e-4, under ``policy_signs``' 1e-6); the tail holds
    thousands of times the baseline's K3, so the lean names the policy beside the semantics."""
    from tests.planted import diagnosis

    cause = diagnosis(held_out_store, "combo-topp-stale-mid", "h-mid-a").section_dict()["cause"]
    assert cause["key"] == "semantics"
    (also,) = cause["also"]
    assert also["key"] == "policy" and also["variant"].endswith("beside the truncation")
    assert also["rate_ratio_ci"][0] > 100
    assert "whole responses lean one way beside the truncation" in also["because"]


def test_an_fp8_cache_beside_top_p_is_said_not_named(held_out_store: Path) -> None:
    """``combo-topp-fp8kv-mid`` over ``h-mid-a`` (top-p 0.98 and an fp8 KV cache): the tail
    holds tens of times the baseline's K3, its responses do not lean, and nothing is named
    beside the truncation (other weights and a precision loss both fill a tail); the
    runner-ups say what the tail holds instead of "its checks did not fire"."""
    from tests.planted import diagnosis

    cause = diagnosis(held_out_store, "combo-topp-fp8kv-mid", "h-mid-a").section_dict()["cause"]
    assert (cause["key"], cause["also"]) == ("semantics", [])
    lost = {r["key"]: r["lost"] for r in cause["runner_ups"]}
    for key in ("policy", "precision"):
        assert "another cause beside the truncation" in lost[key]
        assert "x the baseline's K3 at the same cells" in lost[key]


@pytest.mark.parametrize("run", [slow_param("sem-topp-subtle"), slow_param("sem-badwords-subtle")])
def test_a_truncation_alone_leaves_the_tail_unfilled(calibration_store: Path, run: str) -> None:
    """A truncation alone over its baseline: no tail excess, so nothing said or named beside it
    (its tail carries a fraction of the baseline's K3)."""
    cause = calibration._cause(calibration_store, run, "h-b")["cause"]
    assert (cause["key"], cause["also"]) == ("semantics", [])
    assert not any("beside the truncation" in r["lost"] for r in cause["runner_ups"])


def test_the_lean_gate_sits_between_the_fp8_caches_and_the_policy_signs_gate() -> None:
    """The gates beside a filled tail: under ``policy_signs``' own (the lean is looked for only
    once another cause is shown), above what the fp8 caches lean there (1.17 at p 0.05)."""
    from mismatchctl.analysis.diagnose.checks import policy_signs

    assert 1.17 < beside_truncation.TAIL_LEAN_DISPERSION < policy_signs.T.SIGN_DISPERSION_WARN
    assert policy_signs.T.SIGN_ALPHA < beside_truncation.TAIL_LEAN_ALPHA < 0.05


def test_weights_behind_beside_top_p_that_do_not_lean_are_told_by_their_steps(
    held_out_store: Path,
) -> None:
    """``f-combo-stale-topp`` over ``f-h-a`` (the Llama family, seed 0: top-p 0.9 beside weights
    a checkpoint behind): the tail above the healthy noise is filled over the baseline, but the
    responses lean under the gate there, so the tail alone could not say which cause fills it;
    step 1 stands 2.3x out of the others (the ``spikes`` check), which a precision loss does
    not do: the policy is named beside the truncation (``steps_beside_truncation``)."""
    from mismatchctl.analysis.diagnose.causes import policy
    from tests.planted import diagnosis

    cause = diagnosis(held_out_store, "f-combo-stale-topp", "f-h-a").section_dict()["cause"]
    assert cause["key"] == "semantics"
    (also,) = cause["also"]
    assert (also["key"], also["variant"]) == ("policy", policy.VARYING)
    assert also["checks"] == ["baseline", "spikes"] and "beside the truncation" in also["because"]


def test_a_truncation_alone_that_leans_above_its_reach_is_no_policy_over_its_baseline(
    held_out_store: Path,
) -> None:
    """``g1-sem-topp-loud`` (the second Gemma2 draw's top-p 0.9 alone, made after the lean
    above a truncation's reach was calibrated): its responses lean 1.69 there (p 7e-9), over
    the corpora's 0.81-1.41, and alone the policy is named beside the truncation (a spurious
    second cause: without a baseline nothing tells it). Over its baseline the tail above the
    healthy noise is not filled, so no other cause is there: the semantics alone
    (``peel.lean_above``)."""
    from tests.planted import diagnosis

    cause = diagnosis(held_out_store, "g1-sem-topp-loud", "g1-h-a").section_dict()["cause"]
    assert (cause["key"], cause["also"]) == ("semantics", [])
    alone = diagnosis(held_out_store, "g1-sem-topp-loud").section_dict()["cause"]
    assert [a["key"] for a in alone["also"]] == ["policy"]
