"""The cause ``code_path`` (``analysis/diagnose/causes/code_path.py``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from mismatchctl.analysis.diagnose.advice import STEPS_ADVICE
from mismatchctl.analysis.diagnose.causes import code_path
from mismatchctl.analysis.diagnose.causes.hypothesis import Support
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.engines import plan as K
from tests.analysis.diagnose.stores import calibration, gpus, growth, leaning, requests, turns
from tests.helpers import slow_param
from tests.planted import checks as diagnosed
from tests.planted import diagnosis, spike_steps


def test_spikes_on_every_gpu_stay_a_code_path_beside_a_hot_gpu(gpu_store: Path) -> None:
    checks = gpus._checks(gpu_store, "spikes-and-gpu")
    assert checks["hardware"].verdict in ("warn", "fail")  # A100 at 10x: seen
    spikes = checks["spikes"]
    assert spikes.verdict in ("warn", "fail")
    (run,) = spikes.evidence.runs.values()
    assert {int(s) for s in run.split.elevated_steps} == set(spike_steps(24))
    # two faults: the hot gpu carries most of the excess and is named; the spikes on every gpu
    # are a second cause (they do not follow the gpu)
    cause = checks["cause"]
    assert cause.evidence.cause == "hardware"
    assert [a.key for a in cause.evidence.also] == ["code_path"]
    assert "importance sampling would only reweight" in cause.evidence.also[0].next


@pytest.mark.parametrize("run", ["switch-3x", slow_param("switch-10x")])
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_a_fault_from_one_step_on_is_named_by_its_steps(
    growth_store: Path, run: str, baseline: str | None
) -> None:
    """Every token from step 16 on at 3x (10x): a change at a step, no growth. The plant scales
    every token of those steps alike: hot throughout their responses (``whole_steps.py``), with
    no token id moved on its own and no mass removed (``step_change.py``): the engine's
    arithmetic changed there, the code path of those steps, whose advice asks what changed."""
    checks = diagnosed(growth_store, run, baseline)
    regimes = checks["regimes"]
    assert regimes.verdict in growth.ALARM
    (evidence,) = regimes.evidence.runs.values()
    assert evidence.split.kind == "step change" and evidence.smooth_rise is None
    assert [int(s) for s in evidence.split.elevated_steps] == list(range(16, growth.STEPS))
    assert checks["cause"].evidence.cause == "code_path"
    assert "a code path only some steps take" in regimes.next
    named = checks["cause"].evidence.named
    assert named.variant == code_path.PLACES[K.STEP] and named.where.startswith("step")
    assert "16" in named.where  # from step 16 on: the regimes' part or the localized one
    assert "hot throughout" in named.because and "no id moved on its own" in named.because
    # what changes at a step: the weights served, a restart, a replica; not a kernel to disable
    assert named.next.endswith(STEPS_ADVICE) and "weight sync or reload" in named.next


def test_a_switch_the_trend_sees_rising_says_why_it_is_no_growth(growth_store: Path) -> None:
    """From step 16 on at 3x: the fitted line rises (the trend check warns), but two levels fit
    the steps better; the cause says so with both fits rather than calling it a growth."""
    checks = diagnosed(growth_store, "switch-3x", None)
    assert checks["trend"].verdict in growth.ALARM
    cause = checks["cause"]
    assert cause.evidence.cause == "code_path"
    assert "two levels fit them better than a line" in cause.finding
    assert "a change at a step, not a growth" in cause.finding


def test_a_code_path_comes_before_leaning_responses(leaning_store: Path) -> None:
    """Two steps at 225x and responses that lean: the code path is named (a biased kernel can
    make the responses it hits lean too, as the sample spiky-6's faulty step 3 does: 2.5x on
    its own), the policy_signs check still warns beside it."""
    checks = diagnosed(leaning_store, "lean-spikes")
    signs = checks["policy_signs"]
    assert signs.verdict in leaning.ALARM
    assert "or a biased kernel" in signs.finding and signs.next.startswith("fix the code path")
    assert checks["cause"].evidence.cause == "code_path"


def test_hot_requests_of_one_data_source_are_named_by_it(sequences_store: Path) -> None:
    """The samples of one data source at 3x: the localized check names them
    (``attr:data_source code``), the cause is a code path of those samples with advice about
    what they take that the others do not (not an attention kernel every request takes), and
    the hot_sequences check points at that part."""
    checks = requests._checks(sequences_store, "source-3x")
    local, cause, hot = checks["localized"], checks["cause"], checks["hot_sequences"]
    assert local.verdict in requests.ALARM
    (run,) = local.evidence.runs.values()
    assert run.code_path_findings[0].where == {"attr:data_source": "code"}
    assert cause.evidence.cause == "code_path"
    assert cause.evidence.named.variant == "the samples with data_source code"
    assert "--where attr:data_source=code" in cause.next and "attention" not in cause.next
    assert local.next == cause.next
    assert hot.verdict in requests.ALARM and "the localized check names a part" in hot.next


@pytest.mark.parametrize("run", ["first-3x", slow_param("first-10x")])
@pytest.mark.parametrize("baseline", [None, slow_param("base")])
def test_hotter_first_turns_are_the_prompts_path(
    turns_store: Path, run: str, baseline: str | None
) -> None:
    checks = diagnosed(turns_store, run, baseline)
    local, cause = checks["localized"], checks["cause"]
    assert local.verdict in turns.ALARM
    (evidence,) = local.evidence.runs.values()
    assert evidence.first_turns is True
    top = evidence.code_path_findings[0].where
    assert top.get("turn") == "0" or top.get("turn_kind") == "first"
    assert cause.evidence.cause == "code_path"
    assert cause.evidence.named.variant.startswith("the first turns")
    assert "prompt" in cause.next and "prompt" in local.next
    # the later turns are colder, not hotter: the tool check stays quiet
    assert checks["tool_responses"].verdict == "ok"
    assert checks["tool_responses"].evidence.same_probs_ratio_ci[1] < 1


@pytest.mark.parametrize("baseline", [None, slow_param("h-b")])
def test_a_prefill_path_and_a_rendering_burst_are_not_named_together(
    calibration_store: Path, baseline: str | None
) -> None:
    """Chunked prefill with the chunks' attention merged without their row sums: long KV
    positions hotter than the rest, and the first tokens after each tool response, the first
    decoded after the tool output's prefill, a burst (turn_edges sees a rendering fault's
    shape). The path makes that burst: the template is a runner-up it sets off, not a second
    cause."""
    cause = calibration._cause(calibration_store, "cp-chunk-merge", baseline)["cause"]
    assert cause["key"] == "code_path" and "kv_position" in cause["where"], baseline
    assert cause["also"] == [], baseline
    burst = next(r for r in cause["runner_ups"] if r["key"] == "template")
    assert burst["verdict"] in ("warn", "fail") and burst["share"] > 0.25  # it alarms
    assert burst["lost"] == f"{cause['label']} sets off its checks too"


def test_a_part_past_a_clean_burst_is_the_templates_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A part of the later turns past their starts, beside a burst at their first tokens that
    nothing opposes (no prefill start), has the template against it: a re-rendered context
    raises those positions too. A part of KV positions that reaches the first turns has it
    against it only when the template explains most of the excess (``BURST_MOST``): its long
    positions in the first turns are another fault's. A part of turns that reaches the first,
    one that holds the turns' starts, or a burst the prefill starts explain, keeps the path as
    it was."""
    names = [K.TURN_KIND, K.TURN, K.KV_POSITION, K.TURN_POSITION]
    labels = {K.TURN_KIND: ["first", "later"], K.TURN: ["0", "1", "2"]}
    spec = SimpleNamespace(
        index=names.index,
        dims=[SimpleNamespace(labels=labels.get(n, ["a", "b"])) for n in names],
    )
    ctx = cast(Context, SimpleNamespace(cube=SimpleNamespace(spec=spec)))
    clean = Support("fail", 0.95, "the first 8 tokens after a tool response: 12x", ())
    monkeypatch.setattr(code_path.template, "support", lambda c: clean)
    later = {K.TURN_KIND: [1], K.KV_POSITION: [3]}
    assert code_path._past_a_burst(ctx, later) and code_path._past_a_burst(ctx, {K.TURN: [2]})
    assert code_path._past_a_burst(ctx, {K.KV_POSITION: [3]})  # the first turns' too
    assert not code_path._past_a_burst(ctx, {K.TURN: [0, 2]})
    assert not code_path._past_a_burst(ctx, {K.TURN_KIND: [0, 1], K.STEP: [2]})
    faint = Support("fail", code_path.BURST_MOST - 0.01, "the first 8 tokens: 12x", ())
    monkeypatch.setattr(code_path.template, "support", lambda c: faint)
    assert not code_path._past_a_burst(ctx, {K.KV_POSITION: [3]})  # most is the path's
    assert code_path._past_a_burst(ctx, later)  # within the later turns, whatever its share
    monkeypatch.setattr(code_path.template, "support", lambda c: clean)
    assert not code_path._past_a_burst(ctx, {**later, K.TURN_POSITION: [0]})  # the burst itself
    opposed = Support("fail", 0.95, "burst", (), against=("the start of every prefill is hot",))
    monkeypatch.setattr(code_path.template, "support", lambda c: opposed)
    assert not code_path._past_a_burst(ctx, later)


def test_a_narrower_part_that_explains_as_much_is_the_paths() -> None:
    """The elevated steps explain more than a localized part: they are the path's part, unless
    the localized part holds at most half their tokens and explains as much within
    ``SAME_SHARE`` (the steps' extra share is then another cause's spread over them)."""
    steps = Support("fail", 0.958, "regimes", (), claim=0.83, where="steps 1, 3-6")
    narrow = Support("fail", 0.944, "localized", (), claim=0.07, where="turn 2")
    assert not code_path._better(steps, narrow)
    wide = Support("fail", 0.944, "localized", (), claim=0.5, where="turn 2")
    assert code_path._better(steps, wide)  # not narrower: the larger share wins
    less = Support("fail", 0.958 - code_path.SAME_SHARE - 0.01, "localized", (), claim=0.07)
    assert code_path._better(steps, less)  # explains less beyond the margin
    unknown = Support("fail", 0.944, "localized", (), where="turn 2")
    assert code_path._better(steps, unknown)  # no claim to compare: the share decides
    assert not code_path._better(narrow, steps)  # never the smaller share


@pytest.mark.parametrize("baseline", [slow_param(None), slow_param("h-mid-a")])
def test_a_path_in_most_steps_is_told_by_where_it_runs_within_them(
    calibration_store: Path, baseline: str | None
) -> None:
    """A split-KV path beside stale weights on the model made after calibration: the path runs
    in five of six steps, whose share (95.8%) is the policy's spread over them too; turn 2's
    positions 16-63 explain 94.4% on 7% of the tokens and are the path's part. Outside it the
    first turns lean, and the policy is named beside (read as steps, the outside was one
    step's 32 responses, too few to lean)."""
    cause = calibration._cause(calibration_store, "combo-stale-splitkv-mid", baseline)["cause"]
    assert cause["key"] == "code_path" and cause["where"].startswith("turn 2")
    assert [(a["key"], a["where"]) for a in cause["also"]] == [("policy", "the first turns")]


def test_a_mild_part_without_a_baseline_says_the_precision_too(held_out_store: Path) -> None:
    """``nx-pr-fp8kv`` (the GPT-NeoX member's fp8 KV cache, its first three steps) alone: a
    warning of KV 32-127 at 2.1x the rest, which the split-KV kernels' advice alone would send
    to the wrong place: the advice says the precision too (``PRECISION_TWIN``). Over its
    baseline it is the precision, and the advice does not say it."""
    alone = diagnosis(held_out_store, "nx-pr-fp8kv").section_dict()["cause"]
    assert (alone["key"], alone["verdict"]) == ("code_path", "warn")
    assert alone["next"].endswith(code_path.PRECISION_TWIN)
    over = diagnosis(held_out_store, "nx-pr-fp8kv", "nx-h-a").section_dict()["cause"]
    assert over["key"] == "precision" and code_path.PRECISION_TWIN not in over["next"]


def test_hot_long_positions_point_at_the_positions_own_arithmetic_too(
    held_out_store: Path,
) -> None:
    """``co-u-rope-bf16`` (the Cohere member's engine with its rotary frequencies rounded to
    bf16, as a model cast whole holds them: an angle error growing with the distance; 2.9x a
    healthy run, a fault never calibrated) alone: long KV positions, whose advice says the
    rotary embedding and sliding window each side builds (``POSITION_CONFIG``) beside the
    kernels; over a healthy run of its stack, the same path."""
    alone = diagnosis(held_out_store, "co-u-rope-bf16").section_dict()["cause"]
    assert alone["key"] == "code_path" and alone["where"].startswith("kv_position")
    assert code_path.POSITION_CONFIG in alone["next"]
    over = diagnosis(held_out_store, "co-u-rope-bf16", "co-h-b").section_dict()["cause"]
    assert over["key"] == "code_path" and code_path.POSITION_CONFIG in over["next"]
