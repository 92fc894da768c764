"""The second pass (``analysis/diagnose/causes/outside.py``): a cause of every token tested
outside the louder named cause's part, on the calibration corpus's combinations of two faults."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from mismatchctl.analysis.diagnose.causes import code_path, outside, precision, routing
from mismatchctl.analysis.diagnose.causes.hypothesis import CauseModule, Support, Weighed
from mismatchctl.analysis.diagnose.context import Context
from tests.analysis.diagnose.stores import calibration


@pytest.mark.slow  # a 294x run's diagnosis; the second pass's other cases stay in the quick tier
def test_a_stale_policy_under_a_louder_split_kv_path_is_named_second(
    calibration_store: Path,
) -> None:
    """Weights one optimizer step behind under a split-KV merge bug 100x louder: the path holds
    the K3 and its bias leans the responses it reaches, so the run's lean is no evidence; the
    first turns, where the long-KV path does not reach, lean on their own: the policy second."""
    cause = calibration._cause(calibration_store, "combo-stale-splitkv")["cause"]
    assert cause["key"] == "code_path" and "kv_position" in cause["where"]
    (also,) = cause["also"]
    assert also["key"] == "policy" and also["where"] == "the first turns"
    assert also["checks"] == ["policy_signs"] and "outside the named part" in also["because"]
    assert "policy" not in {r["key"] for r in cause["runner_ups"]}


def test_a_fleet_wide_fp8_cache_under_one_gpus_fault_needs_the_baseline(
    calibration_store: Path,
) -> None:
    """An fp8 KV cache on every gpu and a split-KV bug 1000x louder on the L20: alone, the
    hardware only (a uniform loss is a level without a baseline; the other gpus' responses do
    not lean); against a healthy run of the same gpus, their excess is the precision."""
    alone = calibration._cause(calibration_store, "combo-fp8kv-gpu")["cause"]
    assert alone["key"] == "hardware" and "L20" in alone["where"] and alone["also"] == []
    cause = calibration._cause(calibration_store, "combo-fp8kv-gpu", "h-gpus")["cause"]
    assert cause["key"] == "hardware"
    (also,) = cause["also"]
    assert also["key"] == "precision" and "gpus other than L20" in also["where"]
    low, _ = also["rate_ratio_ci"]
    assert low > 5 and also["checks"] == ["baseline"]


@pytest.mark.slow  # a 3,400x four-device run's diagnosis over its baseline
def test_a_faint_lean_outside_a_part_is_no_precision_loss(calibration_store: Path) -> None:
    """Stale weights on every gpu beside the L20's off-by-one merge, on the model made after
    calibration: the other gpus' responses lean 1.60x (p 7e-6), under what names the policy
    (p < 1e-6) and far from no lean; their excess over the baseline is not called a precision
    loss (it was, with "no response leaning there"): the hardware alone."""
    cause = calibration._cause(calibration_store, "combo-stale-gpu-mid", "h-mid-gpus")["cause"]
    assert cause["key"] == "hardware" and "L20" in cause["where"]
    assert cause["also"] == []


def test_an_excess_that_grows_with_the_kv_position_is_the_parts_own_path(
    calibration_store: Path,
) -> None:
    """The decode path's rotary angles in bf16: the error grows with the position, so the
    turns after tool responses (the long positions) are hot, and the first turns carry an
    excess over the baseline too, 5x at KV 32-63 and 12x at 64-127: the same path at shorter
    positions, not a precision loss, which raises every position alike (the fp8 cache beside
    the L20's fault above is still named)."""
    cause = calibration._cause(calibration_store, "cp-decode-rope", "h-b")["cause"]
    assert cause["key"] == "tool_turns" and cause["also"] == []


def test_beside_routing_flips_the_precision_is_read_before_any_flip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Routing flips have no outside the cube cuts: the second pass reads the precision on the
    tokens before any flip (``precision.beside_flips``), unless evidence stands against it."""
    flips = Weighed(cast(CauseModule, routing), Support("warn", 0.6, "flips", ()), 0.6)
    loss = Weighed(cast(CauseModule, precision), Support("fail", 0.4, "uniform", ()), 0.4)
    found = Support("fail", None, "before any flip: 7.9x", ("baseline",))
    monkeypatch.setattr(precision, "beside_flips", lambda ctx: found)
    (also,) = outside.second_pass(cast(Context, None), flips, [flips, loss])
    assert also.cause is precision and also.support is found
    leaning = Weighed(loss.cause, Support("fail", 0.4, "uniform", (), against=("lean",)), 0.2)
    assert outside.second_pass(cast(Context, None), flips, [flips, leaning]) == []
    monkeypatch.setattr(precision, "beside_flips", lambda ctx: None)
    assert outside.second_pass(cast(Context, None), flips, [flips, loss]) == []


@pytest.mark.slow  # two MoE diagnoses with routes
def test_an_fp8_cache_beside_fp8_router_flips_is_named_over_its_baseline(
    calibration_store: Path,
) -> None:
    """The router's logits in fp8 and an fp8 KV cache: alone, nothing to judge the flip rate or
    the level by (each model's own); over a healthy run of the same model and routes, the
    flips many times the baseline's, and the tokens before any flip in their response hotter
    than the baseline's same tokens: the precision beside the routing."""
    alone = calibration._cause(calibration_store, "combo-router-fp8kv")["cause"]
    assert alone["key"] == "none"
    cause = calibration._cause(calibration_store, "combo-router-fp8kv", "h-moe-b")["cause"]
    (also,) = cause["also"]
    named = {cause["key"]: cause, also["key"]: also}
    assert set(named) == {"routing", "precision"}
    # first, the precision of every token; second, beside the flips, of the tokens before any
    assert named["precision"]["where"] in ("every token", "the tokens before any routing flip")


def test_outside_some_steps_no_precision_loss_is_weighed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A part of some steps: the excess left in the other steps is its cause's, weaker there
    (a lag whose size differs from step to step), so no precision loss is weighed outside it;
    outside a gpu it is. The baseline contrast itself is the ``_excess`` test's."""
    path = Weighed(cast(CauseModule, code_path), Support("fail", 0.9, "steps", ()), 0.9)
    loss = Weighed(cast(CauseModule, precision), Support("fail", 0.4, "uniform", ()), 0.4)
    found = Support("warn", None, "outside: 5.2x the baseline", ("baseline",))
    monkeypatch.setattr(outside, "lean", lambda ctx, out: None)
    monkeypatch.setattr(outside, "_leans_faintly", lambda ctx, out: False)
    monkeypatch.setattr(outside, "_excess", lambda ctx, out, leans: found)
    monkeypatch.setattr(outside, "_other_reasons", lambda w: False)
    for kept, expected in ((False, []), (True, [precision])):
        out = outside.Outside({}, lambda st: st, "the steps other than 1-5", precision=kept)
        monkeypatch.setattr(outside, "outside", lambda ctx, first, o=out: o)
        monkeypatch.setattr(outside, "_shared", lambda ctx, o, s: s)
        got = outside.second_pass(cast(Context, None), path, [path, loss])
        assert [w.cause for w in got] == expected


def test_a_long_kv_parts_outside_keeps_the_positions_before_it() -> None:
    """A path of long KV positions takes every position past its KV length: outside the part
    "KV 32-127" only KV 0-31 is left (the Llama family's off-by-one merge past 96 keys left its
    later turns, all past 96, outside its part, and a precision loss was named there); a part
    without a KV position keeps its outside."""
    from types import SimpleNamespace

    from mismatchctl.engines import plan as K

    labels = ["0-31", "32-63", "64-127", "128-255"]
    spec = SimpleNamespace(index=lambda name: 3, level_label=lambda d, codes: labels[codes[0]])
    turns = outside.Outside({K.TURN_KIND: [1]}, lambda st: st, "the later turns")
    got = outside._below(spec, {K.KV_POSITION: [1, 2], K.TURN: [0]}, turns)
    assert got.region == {K.TURN_KIND: [1], K.KV_POSITION: [0]}
    assert got.text == "the later turns before KV 32" and got.restrict is turns.restrict
    assert outside._below(spec, {K.TURN: [2]}, turns) is turns


def test_a_level_outside_the_later_turns_holding_most_of_the_excess_is_named_first(
    held_out_store: Path,
) -> None:
    """``f-L-pr-fp8kv`` over ``f-L-h-b`` (an fp8 KV cache on responses of 680 tokens, 16 of them
    over 16 healthy ones): the later turns 1.8x the first, which are themselves 14x the
    baseline in a run 22x it, so at the first turns' level every token holds 63% of the
    excess (``outside.level_over_part``): the precision is named, and the later turns, a
    finding of its own (its ``EXPLAINS``), are its runner-up."""
    from tests.planted import diagnosis

    found = diagnosis(held_out_store, "f-L-pr-fp8kv", "f-L-h-b").section_dict()
    cause = found["cause"]
    assert (cause["key"], cause["also"]) == ("precision", [])
    assert cause["where"] == "every token" and "at that level every token holds" in cause["because"]
    later = next(r for r in cause["runner_ups"] if r["key"] == "tool_turns")
    assert "sets off its checks" in later["lost"]


@pytest.mark.parametrize("baseline", [None, "h-gpus"])
def test_a_temperature_on_every_gpu_beside_one_gpus_fault_is_named_second(
    held_out_store: Path, baseline: str | None
) -> None:
    """``pair-temp-gpu`` (made after every rule: "Pairs never calibrated"): the trainer without
    the engine's temperature (1.0 against 0.9) on every gpu, and the L20's off-by-one split-KV
    merge, 206x the other gpus. On the whole run the L20's noise dilutes the line to 0.2% of
    r's variance, under the ``temperature`` check's 5%; on the other gpus it holds 54% with a
    slope 0.944: the semantics is named beside the hardware, alone and over the baseline."""
    from tests.planted import diagnosis

    cause = diagnosis(held_out_store, "pair-temp-gpu", baseline).section_dict()["cause"]
    assert cause["key"] == "hardware" and "L20" in cause["where"]
    (also,) = cause["also"]
    assert also["key"] == "semantics" and "gpus other than L20" in also["where"]
    assert also["checks"] == ["temperature"] and also["verdict"] == "fail"
    assert "outside the named part" in also["because"] and "trainer ~ 0.94" in also["because"]


def test_a_temperature_beside_a_batch_variant_path_is_no_precision_loss(
    held_out_store: Path,
) -> None:
    """``pair-batchvar-temp`` over ``h-b`` (its first three steps): a batch-variant split-K path
    hot at long KV, and the trainer at 0.91 against the engine's 0.9. Outside the path's part
    the excess over the baseline was named a precision loss (uniform, no response leaning); the
    first turns' line (slope 0.9936, 23% of r's variance there, 15 standard errors from 1) is
    the temperature's, whose excess over a baseline is exactly that level."""
    from tests.planted import diagnosis

    cause = diagnosis(held_out_store, "pair-batchvar-temp", "h-b").section_dict()["cause"]
    assert cause["key"] == "code_path"
    assert [a["key"] for a in cause["also"]] == ["semantics"]
    assert cause["also"][0]["where"] == "the first turns"


def test_the_line_outside_a_part_keeps_the_temperature_checks_thresholds(
    held_out_store: Path,
) -> None:
    """The healthy four-device run and h-b raise nothing, alone or against each other: the
    line outside a part is read only beside a part named first, at the check's own gates."""
    from tests.planted import diagnosis

    for run, baseline in [("h-gpus", None), ("h-b", None), ("h-gpus", "h-b")]:
        assert diagnosis(held_out_store, run, baseline).section_dict()["verdict"] == "ok"


@pytest.mark.parametrize(
    ("shape", "shift", "run", "outside_ratio", "temperature"),
    [("uniform", -0.33, 2.35, 2.3, True), ("uniform", -0.33, 2.35, 4.0, False),
     ("uniform", -0.05, 2.35, 2.3, False), ("localized", -0.33, 2.35, 2.3, False)],
)  # fmt: skip
def test_the_level_outside_a_part_at_a_lower_temperature_is_no_precision(
    shape: str, shift: float, run: float, outside_ratio: float, temperature: bool
) -> None:
    """When the ``baseline`` check read the run's uniform excess as a lower temperature's
    (``baseline.another_temperature``), the level outside a part named first is that
    temperature's up to ``TEMPERATURE_K3`` (the 8192-token Llama at 0.6 over 0.9 with a bf16
    trainer: 2.3x outside a spot of 2% of its tokens, named a precision loss); a level beyond
    it, a run of the baseline's own mix or an excess in a part is not."""
    from types import SimpleNamespace

    from mismatchctl.analysis.diagnose.check import Check
    from mismatchctl.analysis.diagnose.checks import baseline

    e = baseline.Evidence(
        baseline="b", vllm_kl=run * 1e-4, baseline_vllm_kl=1e-4, rate_ratio=run,
        rate_ratio_ci=(run * 0.9, run * 1.1), findings=[], uniform=["step", "bin"],
        decomposition=[], notes=[], mix_shift=shift, excess_shape=shape,
    )  # fmt: skip
    check = Check(baseline.LAYER, baseline.NAME, baseline.TITLE, "ok", "", e)
    ctx = SimpleNamespace(result=lambda c: check)
    assert outside._temperature(cast(Context, ctx), outside_ratio) is temperature
