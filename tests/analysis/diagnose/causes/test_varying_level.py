"""``causes/varying_level.py``: over a baseline, a level that varies from step to step is other
weights, not a precision loss (a property of the engine's arithmetic, the same at every step)."""

from __future__ import annotations

from pathlib import Path

from mismatchctl.analysis.diagnose.causes import policy
from tests.planted import diagnosis


def test_stale_weights_whose_first_step_stands_out_are_named_the_policy(
    held_out_store: Path,
) -> None:
    """``f-pol-stale`` over ``f-h-a`` (the Llama family, seed 0: weights a checkpoint behind):
        225x the baseline, spread over every part, no response leaning, which a precision loss's
        signature reads too, but step 1 is 2.4x the others (the ``spikes`` check): the policy is
        named, the precision is its runner-up, and the advice says the numbers cannot rule the
        precision out. Alone, without the level, its first step is hot throughout its responses:
    the policy too (``whole_steps.py``)."""
    cause = diagnosis(held_out_store, "f-pol-stale", "f-h-a").section_dict()["cause"]
    assert (cause["key"], cause["variant"]) == ("policy", policy.VARYING)
    assert cause["checks"] == ["baseline", "spikes"] and "step 1 at 2." in cause["because"]
    assert "a precision loss raises every step alike" in cause["because"]
    loss = next(r for r in cause["runner_ups"] if r["key"] == "precision")
    assert loss["verdict"] == "fail" and "sets off its checks" in loss["lost"]
    assert "cannot rule the precision out" in cause["next"]
    alone = diagnosis(held_out_store, "f-pol-stale").section_dict()["cause"]
    assert (alone["key"], alone["variant"]) == ("policy", policy.AT_STEPS)


def test_a_precision_loss_the_same_at_every_step_stays_a_precision_loss(
    held_out_store: Path,
) -> None:
    """``pr-fp8kv-wide`` over ``h-wide-a``: an fp8 KV cache, no step split from the others:
    the precision, as before; a healthy run over the stale one is no alarm."""
    found = diagnosis(held_out_store, "pr-fp8kv-wide", "h-wide-a").section_dict()
    assert found["cause"]["key"] == "precision"
    spikes = next(c for c in found["checks"] if c["name"] == "spikes")
    assert spikes["verdict"] in ("ok", "n/a")  # its first three steps
    assert diagnosis(held_out_store, "f-h-a", "f-pol-stale").section_dict()["verdict"] == "ok"


def test_a_precision_beside_routing_flips_that_varies_by_step_is_the_policy(
    held_out_store: Path,
) -> None:
    """``m-pol-stale`` over ``m-h-a6`` (the family's MoE, seed 0, whole runs: weights a
    checkpoint behind): the flips are named first, and the level before any flip, which was
    named a precision loss beside them, varies from step to step (step 1 2.1x the others):
    the policy beside the routing (``varying_second``)."""
    cause = diagnosis(held_out_store, "m-pol-stale", "m-h-a6").section_dict()["cause"]
    assert cause["key"] == "routing"
    (also,) = cause["also"]
    assert (also["key"], also["variant"]) == ("policy", policy.VARYING)
    assert (
        also["checks"][-1] == "spikes" and "a precision loss raises every step" in also["because"]
    )


def test_the_split_of_the_steps_is_the_varying_levels_own_finding(held_out_store: Path) -> None:
    """``g1-pol-stale`` over ``g1-h-a`` (the second Gemma2 draw's weights a checkpoint behind):
    the precision was named first, its step 1 a code path beside it (25% of the excess); the
    steps' variation names the policy, and the step that stands out is its own finding, no
    second cause (``steps_part``)."""
    cause = diagnosis(held_out_store, "g1-pol-stale", "g1-h-a").section_dict()["cause"]
    assert (cause["key"], cause["variant"], cause["also"]) == ("policy", policy.VARYING, [])
    path = next(r for r in cause["runner_ups"] if r["key"] == "code_path")
    assert path["where"] in ("step 1", "steps 1")


def test_steps_in_two_regimes_split_them_too(held_out_store: Path) -> None:
    """``g1-combo-stale-topp`` over ``g1-h-a``: top-p beside weights a checkpoint behind, the
    tail filled, no lean; its steps 1 and 2 stand 2.1x out as a regime, not a spike: the
    ``regimes`` check's split names the policy beside the truncation as the ``spikes``
    check's does (``steps_split``)."""
    cause = diagnosis(held_out_store, "g1-combo-stale-topp", "g1-h-a").section_dict()["cause"]
    assert cause["key"] == "semantics"
    (also,) = cause["also"]
    assert also["key"] == "policy" and also["checks"] == ["baseline", "regimes"]


def test_a_precision_loss_beside_a_kernel_from_a_step_on_is_no_policy(
    held_out_store: Path,
) -> None:
    """``un-fp8kv-splitkv-restart`` over ``h-b``: an fp8 KV cache at every step, and a faulty
    split-KV combine on every token from step 4 on. The level over the baseline varies from
    step to step (steps 4-6 at 2.7x the others), but those steps moved no token id on their own
    (0.1% of r's variance): the engine's arithmetic, not other weights. The precision is named,
    the code path of the steps beside it."""
    cause = diagnosis(held_out_store, "un-fp8kv-splitkv-restart", "h-b").section_dict()["cause"]
    assert cause["key"] == "precision" and cause["variant"] != policy.VARYING
    (also,) = cause["also"]
    assert also["key"] == "code_path" and also["where"] == "steps 4, 5, 6"


def test_a_split_not_read_as_the_weights_says_why_the_policy_lost(
    held_out_store: Path,
) -> None:
    """Where the precision is named though the steps split (``un-fp8kv-splitkv-restart`` over
    ``h-b``: no token id moved on its own), the policy's runner-up says what the split showed
    and why it was not read as the weights' (``split_unread``); where nothing splits the
    steps (``pr-fp8kv-wide``) its checks simply did not fire."""
    cause = diagnosis(held_out_store, "un-fp8kv-splitkv-restart", "h-b").section_dict()["cause"]
    lost = next(r for r in cause["runner_ups"] if r["key"] == "policy")["lost"]
    assert lost.startswith("its checks did not fire; the steps split (")
    assert "under 0.6%" in lost and "cannot tell other weights from the arithmetic" in lost
    flat = diagnosis(held_out_store, "pr-fp8kv-wide", "h-wide-a").section_dict()["cause"]
    lost = next(r for r in flat["runner_ups"] if r["key"] == "policy")["lost"]
    assert lost == "its checks did not fire"
