"""Peel the first cause, then look again (``analysis/diagnose/causes/peel.py``): whether one
cause's fault sets off another's checks is decided on what is left without the first, on the
calibration corpus's subtle stale policy beside a subtle split-KV path, and on the relation's
cases one by one."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import cast

import pytest

from mismatchctl.analysis.diagnose.causes import (
    code_path,
    hardware,
    peel,
    policy,
    precision,
    semantics,
    stop,
)
from mismatchctl.analysis.diagnose.causes.hypothesis import CauseModule, Support, Weighed
from mismatchctl.analysis.diagnose.causes.outside import Outside
from mismatchctl.analysis.diagnose.causes.parts import where_text
from mismatchctl.analysis.diagnose.check import Check
from mismatchctl.analysis.diagnose.checks import offset
from mismatchctl.analysis.diagnose.context import Context
from tests.analysis.diagnose.stores import calibration
from tests.helpers import slow_param
from tests.planted import diagnosis


def _weighed(cause: ModuleType, region: dict[str, list[int]] | None = None) -> Weighed:
    found = Support("warn", 0.3, "planted", (), region=region)
    return Weighed(cast(CauseModule, cause), found, 0.3)


NO_CONTEXT = cast(Context, None)  # the cases below decide before reading the run


def test_a_part_of_whole_responses_beside_a_policy_stays_the_policys() -> None:
    """Some steps hotter than the others: a lag that differs from step to step makes them (a
    checkpoint behind: steps 1-2 at 2.0x), so the policy explains the part, either way round."""
    steps = _weighed(code_path, {"step": [0, 1]})
    assert peel.explains(NO_CONTEXT, _weighed(policy), steps)
    assert peel.explains(NO_CONTEXT, steps, _weighed(policy))


def test_the_declared_relation_holds_where_nothing_is_peeled() -> None:
    """The semantics beside a lean or a precision loss keeps its relation; causes that declare
    none stay apart."""
    assert peel.explains(NO_CONTEXT, _weighed(semantics), _weighed(policy))
    assert peel.explains(NO_CONTEXT, _weighed(semantics), _weighed(precision))
    assert not peel.explains(NO_CONTEXT, _weighed(policy), _weighed(stop, {"turn": [2]}))
    assert "turn" in peel.WITHIN_RESPONSES and "step" not in peel.WITHIN_RESPONSES


def test_a_part_within_the_responses_stands_beside_a_lean_outside_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A code path of KV positions in turn 2 beside a policy: the relation is lifted when the
    responses lean outside the part (the first turns), and holds when they do not (the path's
    bias leans the responses it hits) or when the part has no outside to test."""
    path = _weighed(code_path, {"turn": [2], "kv_position": [4]})
    out = Outside({"turn_kind": [0]}, lambda st: st, "the first turns")
    leaning = Support("warn", None, "the first turns lean", ("policy_signs",))
    monkeypatch.setattr(peel, "outside", lambda ctx, w: out if w is path else None)
    monkeypatch.setattr(peel, "lean", lambda ctx, found: leaning if found is out else None)
    assert not peel.explains(NO_CONTEXT, _weighed(policy), path)
    assert not peel.explains(NO_CONTEXT, path, _weighed(policy))
    monkeypatch.setattr(peel, "lean", lambda ctx, found: None)
    assert peel.explains(NO_CONTEXT, _weighed(policy), path)
    monkeypatch.setattr(peel, "outside", lambda ctx, w: None)
    assert peel.explains(NO_CONTEXT, path, _weighed(policy))


def test_a_path_whose_part_holds_the_lean_is_named_over_the_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A policy named first for its lean, beside a code path of KV positions in turn 2: when
    the first turns do not lean, the lean is the path's (a biased kernel) and the path is named;
    when they lean, or the part is whole responses (some steps) or has no outside to test, the
    policy stays first."""
    path = _weighed(code_path, {"turn": [2], "kv_position": [4]})
    first = _weighed(policy)
    out = Outside({"turn_kind": [0]}, lambda st: st, "the first turns")
    leaning = Support("warn", None, "the first turns lean", ("policy_signs",))
    monkeypatch.setattr(peel, "outside", lambda ctx, w: out if w is path else None)
    monkeypatch.setattr(peel, "lean", lambda ctx, found: None)
    assert peel.path_over_lean(NO_CONTEXT, first, [first, path]) is path
    assert peel.path_over_lean(NO_CONTEXT, path, [first, path]) is None  # no policy first
    steps = _weighed(code_path, {"step": [0, 1]})
    assert peel.path_over_lean(NO_CONTEXT, first, [first, steps]) is None
    assert not peel.beside_lean(NO_CONTEXT, first, path)  # the path explains the lean
    monkeypatch.setattr(peel, "lean", lambda ctx, found: leaning if found is out else None)
    assert peel.path_over_lean(NO_CONTEXT, first, [first, path]) is None
    assert peel.beside_lean(NO_CONTEXT, first, path)  # both stand: named whatever its share
    assert not peel.beside_lean(NO_CONTEXT, path, first)  # only beside a policy named first
    monkeypatch.setattr(peel, "outside", lambda ctx, w: None)
    assert peel.path_over_lean(NO_CONTEXT, first, [first, path]) is None


def test_a_path_one_gpu_holds_is_the_hardwares_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hardware named from a part in which one gpu is hotter than the others explains the
    code path of that part, either way round; another part, a part hot on the other gpus too
    (spikes on every gpu beside a gpu hot everywhere) or a part no gpu holds stands beside
    it."""
    where = {"turn": "2", "kv_position": "128-255"}
    path = _weighed(code_path, {"turn": [2], "kv_position": [4]})
    path = Weighed(path.cause, replace(path.support, where=where_text(where)), path.score)
    held = ("L20", {"where": where, "ratio": (6.2, (3.0, 9.0))})
    monkeypatch.setattr(peel, "path_on_one_gpu", lambda ctx: held)
    monkeypatch.setattr(peel, "hot_on_other_gpus", lambda found: False)
    assert peel.explains(NO_CONTEXT, _weighed(hardware), path)
    assert peel.explains(NO_CONTEXT, path, _weighed(hardware))
    steps = _weighed(code_path, {"step": [3, 4]})  # another part than the one the gpu holds
    monkeypatch.setattr(peel, "steps_of_gpu", lambda ctx, path: False)
    assert not peel.explains(NO_CONTEXT, _weighed(hardware), steps)
    monkeypatch.setattr(peel, "steps_of_gpu", lambda ctx, path: True)  # steps the gpu's own
    assert peel.explains(NO_CONTEXT, _weighed(hardware), steps)
    monkeypatch.setattr(peel, "steps_of_gpu", lambda ctx, path: False)
    monkeypatch.setattr(peel, "hot_on_other_gpus", lambda found: True)  # a gpu hot everywhere
    assert not peel.explains(NO_CONTEXT, _weighed(hardware), path)
    monkeypatch.setattr(peel, "path_on_one_gpu", lambda ctx: None)
    assert not peel.explains(NO_CONTEXT, _weighed(hardware), path)


def test_steps_that_are_the_hot_gpus_are_its_finding(held_out_store: Path) -> None:
    """One device of four splitting KV past 96 keys a key late (``sw-gpu-splitdrop-96``, the
    Llama's ``s-gpu-splitdrop-96`` of ``family.py --sweep``): the fault hits only the batches
    whose padding puts a real key there, so steps 1-5 stand 16x step 6 (the ``regimes``
    check), every one of them on that gpu. The hardware is named alone; the steps' code path
    is its runner-up, the gpu's finding (``steps_of_gpu``)."""
    found = diagnosis(held_out_store, "sw-gpu-splitdrop-96").section_dict()["cause"]
    assert (found["key"], found["where"], found["also"]) == ("hardware", "gpu gpu1", [])
    path = next(r for r in found["runner_ups"] if r["key"] == "code_path")
    assert path["where"].startswith("steps ") and "the hot gpu's" in path["lost"]


def test_the_l20_path_over_its_baseline_is_one_cause(calibration_store: Path) -> None:
    """The split-KV path only the L20 replica takes, over a healthy run on the same gpus: the
    hardware is named from the part the code path finds, which is no second cause beside it."""
    cause = calibration._cause(calibration_store, "hw-l20-splitkv-subtle", "h-gpus")["cause"]
    assert cause["key"] == "hardware" and cause["also"] == []
    path = next(r for r in cause["runner_ups"] if r["key"] == "code_path")
    assert (
        path["verdict"] == "warn"
        and path["lost"] == "its part lies on gpu L20's tokens (the hardware)"
    )


@pytest.mark.parametrize("baseline", [slow_param(None), slow_param("h-b")])
def test_a_subtle_policy_beside_a_subtle_path_is_named_when_the_first_turns_lean(
    calibration_store: Path, baseline: str | None
) -> None:
    """Weights one optimizer step behind and a split-KV combine without its row sums (KV >=
    192, turn 2): the policy holds 76% of the excess, the path's part 2.6x the rest at the same
    token probabilities. The part lies within the responses, where other weights raise nothing,
    and the first turns, which the path does not reach, lean on their own (1.8x): neither
    explains the other (the part's outside is found from its turn and KV position, a
    conjunction whose length alone spans both turn kinds). Both are named, alone too, where
    the part's 24% of the run is under a quarter of the excess: both stand on their own checks
    (it was a runner-up, "explains 24%, against 76%")."""
    cause = calibration._cause(calibration_store, "combo-stale-splitkv-subtle", baseline)["cause"]
    assert cause["key"] == "policy"
    (also,) = cause["also"]
    assert also["key"] == "code_path" and "kv_position 128-255" in also["where"]
    low, _ = also["rate_ratio_ci"]
    assert low > 1.5


def _semantics(variant: str) -> Weighed:
    found = Support("fail", None, "planted", (), variant=semantics.VARIANTS[variant])
    return Weighed(cast(CauseModule, semantics), found, 1.0)


def test_a_lean_above_a_truncations_reach_is_another_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Beside a truncation the relation is lifted when the responses lean above the healthy
    noise, either way round, and the policy is named from the peel even when its checks on the
    whole run do not alarm; beside a temperature, which moves r both ways, it holds."""
    cut, line = _semantics("top_p"), _semantics("temperature")
    leaning = Support("warn", None, "the tail leans", ("policy_signs",))
    quiet = Weighed(cast(CauseModule, policy), Support("ok", 0.0, "no lean", ()), 0.0)
    monkeypatch.setattr(peel, "lean_above", lambda ctx: leaning)
    assert not peel.explains(NO_CONTEXT, cut, _weighed(policy))
    assert not peel.explains(NO_CONTEXT, _weighed(policy), cut)
    assert peel.explains(NO_CONTEXT, line, _weighed(policy))
    (found,) = peel.peeled(NO_CONTEXT, cut, [cut, quiet])
    assert found.cause is policy and found.support is leaning
    assert peel.peeled(NO_CONTEXT, line, [line, quiet]) == []
    assert peel.peeled(NO_CONTEXT, cut, [cut, _weighed(policy)]) == []  # weighed as a second
    monkeypatch.setattr(peel, "lean_above", lambda ctx: None)
    beside = Support("warn", None, "the filled tail leans", ("policy_signs", "baseline"))
    monkeypatch.setattr(peel, "lean_beside_truncation", lambda ctx: beside)
    (found,) = peel.peeled(NO_CONTEXT, cut, [cut, quiet])  # the tail filled over a baseline
    assert found.cause is policy and found.support is beside
    monkeypatch.setattr(peel, "lean_beside_truncation", lambda ctx: None)
    steps = Support("fail", None, "the filled tail's steps differ", ("baseline", "spikes"))
    monkeypatch.setattr(peel, "steps_beside_truncation", lambda ctx: steps)
    (found,) = peel.peeled(NO_CONTEXT, cut, [cut, quiet])  # no lean, the steps differ
    assert found.cause is policy and found.support is steps
    monkeypatch.setattr(peel, "steps_beside_truncation", lambda ctx: None)
    assert peel.explains(NO_CONTEXT, cut, _weighed(policy))
    assert peel.peeled(NO_CONTEXT, cut, [cut, quiet]) == []


@pytest.mark.parametrize(("mean", "lowers"), [(-0.039, True), (0.063, False)])
def test_a_shift_lowers_r_when_the_rollout_side_is_higher(mean: float, lowers: bool) -> None:
    """A one-sided shift with the mean r below zero (top-p beside other weights, whose
    two-signed r hides the mean ratio from the top-p check) only lowers r; above zero (raw
    logprobs on the trainer side) it does not."""
    evidence = offset.Evidence(
        log_ratio_mean=mean, log_ratio_se=0.002, log_ratio_z=mean / 0.002, negative_share=0.72
    )
    check = Check("semantic", offset.NAME, offset.TITLE, "fail", "planted", evidence)
    ctx = cast(Context, SimpleNamespace(result=lambda module: check))
    assert semantics.lowers(ctx, _semantics("offset").support) is lowers


def test_a_line_beside_a_precision_loss_named_over_a_baseline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The precision named over a baseline with nothing against it: a temperature's line told
    by its scatter between responses is named beside it; not without a baseline, not beside
    a precision with evidence against it, and not when the semantics alarms on its own (then
    it is weighed as any cause)."""
    loss = Weighed(cast(CauseModule, precision), Support("fail", None, "uniform", ()), 1.0)
    doubted = Weighed(loss.cause, Support("fail", None, "uniform", (), against=("lean",)), 0.5)
    quiet = Weighed(cast(CauseModule, semantics), Support("ok", 0.0, "no sign", ()), 0.0)
    line = Support("warn", None, "slope 0.9946, 10.7 standard errors from 1", ("temperature",))
    monkeypatch.setattr(semantics, "beside_noise", lambda ctx: line)
    based = cast(Context, SimpleNamespace(baseline=object()))
    (found,) = peel.peeled(based, loss, [loss, quiet])
    assert found.cause is semantics and found.support is line
    assert peel.peeled(cast(Context, SimpleNamespace(baseline=None)), loss, [loss, quiet]) == []
    assert peel.peeled(based, doubted, [doubted, quiet]) == []
    assert peel.peeled(based, loss, [loss, _weighed(semantics)]) == []
    monkeypatch.setattr(semantics, "beside_noise", lambda ctx: None)
    assert peel.peeled(based, loss, [loss, quiet]) == []


@pytest.mark.parametrize("baseline", [slow_param(None), slow_param("h-b")])
def test_a_sliding_window_that_leans_its_part_is_the_code_path(
    calibration_store: Path, baseline: str | None
) -> None:
    """A sliding window of 96 slots beside an fp8 KV cache: the later turns at KV 128-255 hold
    43% of the excess and the responses lean, but not in the first turns, which the window does
    not reach. It was named another policy (57%, the complement of the part); the path is named
    and the policy is its runner-up, set off by it. Over the baseline the fp8 cache's excess in
    the first turns, 16x the baseline in a run 30x it, holds half of the excess at every token
    (``outside.level_over_part``): the precision is named first, the path beside it."""
    cause = calibration._cause(calibration_store, "combo-window-fp8kv", baseline)["cause"]
    named = [cause, *cause["also"]]
    path = next(c for c in named if c["key"] == "code_path")
    assert "kv_position 128-255" in path["where"]
    policy_up = next(r for r in cause["runner_ups"] if r["key"] == "policy")
    if baseline is None:  # alone the lean is under the policy_signs gate (1.8)
        assert policy_up["verdict"] == "ok"
        assert cause["key"] == "code_path" and cause["also"] == []
    else:
        assert policy_up["verdict"] in ("warn", "fail")
        assert "sets off its checks" in policy_up["lost"] or "same finding" in policy_up["lost"]
        assert [c["key"] for c in named] == ["precision", "code_path"]
        assert "at that level every token holds" in cause["because"]
        assert [r["key"] for r in cause["runner_ups"]].count("precision") == 0


@pytest.mark.parametrize("baseline", [slow_param(None), slow_param("h-b")])
def test_a_checkpoint_behind_beside_top_p_is_named_from_the_lean_above_the_noise(
    calibration_store: Path, baseline: str | None
) -> None:
    """Top-p 0.98 beside weights one checkpoint behind: the truncation leads, and the
    responses lean among the tokens above the healthy noise, where a truncation moves none
    (``policy.lean_above_truncation``): another policy beside it, alone and over the
    baseline."""
    cause = calibration._cause(calibration_store, "combo-topp-stale", baseline)["cause"]
    assert cause["key"] == "semantics"
    (also,) = cause["also"]
    assert also["key"] == "policy" and "above the healthy noise" in also["because"]


def test_the_level_is_the_policys_where_responses_lean_outside_a_path(
    held_out_store: Path,
) -> None:
    """``combo-stale-splitkv-subtle-mid`` over ``h-mid-a`` (the second machine's corpus, its first
    five steps): outside the split-KV path's part the run is many times the baseline, so that
    part is no place of the excess and the level is named; the first turns, which the path does
    not reach, lean, so the level is other weights', not a precision loss's
    (``peel.level_leans``)."""
    from tests.planted import diagnosis

    found = diagnosis(held_out_store, "combo-stale-splitkv-subtle-mid", "h-mid-a").section_dict()
    cause = found["cause"]
    assert (cause["key"], [a["key"] for a in cause["also"]]) == ("policy", ["code_path"])
    assert "outside the named part, in the first turns" in cause["because"]
    base = next(c for c in found["checks"] if c["name"] == "baseline")
    assert base["evidence"]["excess_shape"] != "localized"
    assert "precision" in {r["key"] for r in cause["runner_ups"]}


@pytest.mark.parametrize("first", [policy, code_path])
def test_the_level_is_relabelled_only_from_a_precision_beside_a_path(first: ModuleType) -> None:
    """Only the precision named first, with a code path of a part within the responses beside
    it, is read again outside that part."""
    path = _weighed(code_path, {"turn": [2], "kv_position": [4]})
    assert peel.level_leans(NO_CONTEXT, _weighed(first), [path], [_weighed(policy)]) is None
    assert peel.level_leans(NO_CONTEXT, _weighed(precision), [], [_weighed(policy)]) is None
    steps = _weighed(code_path, {"step": [3]})  # whole responses: no part within them
    assert peel.level_leans(NO_CONTEXT, _weighed(precision), [steps], [_weighed(policy)]) is None


def test_a_part_no_hotter_than_the_precisions_level_over_the_baseline_is_its_shape(
    held_out_store: Path,
) -> None:
    """``nx-pr-fp8kv`` over ``nx-h-a`` (the GPT-NeoX member's fp8 KV cache, its first three
    steps): on the run's own noise model KV 32-127 is twice the rest, a code path; over the
    baseline the part and the rest stand at about the same level (the loss grows a little with
    the context): the precision alone, the path its runner-up saying why
    (``peel.level_shape``). Alone, without the level, the part is what shows."""
    from tests.planted import diagnosis

    cause = diagnosis(held_out_store, "nx-pr-fp8kv", "nx-h-a").section_dict()["cause"]
    assert (cause["key"], cause["also"]) == ("precision", [])
    path = next(r for r in cause["runner_ups"] if r["key"] == "code_path")
    assert path["verdict"] in ("warn", "fail")
    assert path["lost"].startswith("over the baseline its part is no hotter than the rest's level")
    alone = diagnosis(held_out_store, "nx-pr-fp8kv").section_dict()["cause"]
    assert alone["key"] == "code_path"


def test_a_gpu_standing_on_its_own_test_beside_a_transform_is_named(held_out_store: Path) -> None:
    """A temperature of 0.97 against 1.0 beside one device of four with an fp8 KV cache
    (``co-combo-temp-gpu``, the Cohere member's ``f-combo-temp-gpu`` of a fresh draw, alone):
    the temperature is named first; gpu2 is 1.9x the other gpus on the ``hardware`` check's
    own test and holds 17% of the excess, under the second cause's quarter: named beside it
    (``gpu_beside_level``), where it was a runner-up."""
    cause = diagnosis(held_out_store, "co-combo-temp-gpu").section_dict()["cause"]
    assert cause["key"] == "semantics"
    (also,) = cause["also"]
    assert (also["key"], also["where"]) == ("hardware", "gpu gpu2")
    assert also["share"] < 0.25


def test_a_burst_after_the_tool_responses_on_one_gpu_is_its_finding(held_out_store: Path) -> None:
    """One device of four splitting KV a key late past 96 keys (``g3-gpu-splitdrop-96``, the
    Gemma2 member's ``s-gpu-splitdrop-96`` of ``family.py --sweep --seed 3``): the first
    tokens after a tool response are 4.1x the rest of those turns, the template's signature,
    but on the other gpus the later turns are no hotter than the first at the same token
    probabilities: the burst is the gpu's (``burst_of_gpu``), no template beside it."""
    cause = diagnosis(held_out_store, "g3-gpu-splitdrop-96").section_dict()["cause"]
    assert (cause["key"], cause["also"]) == ("hardware", [])
    template = next(r for r in cause["runner_ups"] if r["key"] == "template")
    assert template["verdict"] == "warn"  # the burst is there: its check still warns
