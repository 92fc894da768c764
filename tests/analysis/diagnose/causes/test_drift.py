"""``causes/drift.py``: a uniform excess over a baseline whose token ids move on their own and
drift over the run is other weights, not a precision loss; ids that move alike throughout (a
wrong attention scale) leave the precision named."""

from __future__ import annotations

from pathlib import Path

from mismatchctl.analysis.diagnose.causes import policy
from mismatchctl.analysis.diagnose.causes.drift import DRIFT
from mismatchctl.analysis.diagnose.checks import token_shift
from tests.planted import diagnosis


def _shift(found: dict) -> dict:
    return next(c for c in found["checks"] if c["name"] == "token_shift")["evidence"]


def test_weights_an_optimizer_step_behind_drift_and_are_the_policy(held_out_store: Path) -> None:
    """``w90-pol-lag`` (a Llama pre-trained 90 iterations, rollouts one optimizer step behind:
    38x ``w90-h-b``, uniform, no response leaning) was a precision loss over its baseline: its
    ids carry 7.2% of ``r``'s variance and drift 11% from the first half of the steps to the
    second. Now the policy, the precision a runner-up saying why; alone it stays quiet (a level
    without a baseline is no alarm)."""
    found = diagnosis(held_out_store, "w90-pol-lag", "w90-h-b").section_dict()
    cause = found["cause"]
    assert (cause["key"], cause["variant"]) == ("policy", policy.DRIFTING)
    assert "drift" in cause["because"] and "compare the weight versions" in cause["next"]
    e = _shift(found)
    assert e["id_share"] >= token_shift.T.ID_WEIGHTS and e["id_drift"] >= DRIFT
    lost = next(r for r in cause["runner_ups"] if r["key"] == "precision")
    assert "drift" in lost["lost"]
    assert diagnosis(held_out_store, "w90-pol-lag").section_dict()["verdict"] == "ok"


def test_a_fixed_function_moving_ids_alike_throughout_stays_the_precision(
    held_out_store: Path,
) -> None:
    """``s29-attn-scale-loud`` (the engine's softmax scale 2% off: 15x ``s29-h-b``, uniform):
    its ids carry 4.9% of ``r``'s variance, as much as other weights move them, but alike in
    both halves of the run (0.00% beyond, correlated 0.91): the precision it was planted as."""
    found = diagnosis(held_out_store, "s29-attn-scale-loud", "s29-h-b").section_dict()
    assert found["cause"]["key"] == "precision"
    e = _shift(found)
    assert e["id_share"] >= token_shift.T.ID_WEIGHTS and e["id_drift"] < DRIFT
