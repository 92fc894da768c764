"""A code path that only some tokens take: a part of the run (long KV positions, the first tokens
of each turn, the first turns, some steps, some engine batches, the samples of one source) hotter
than the rest at the same token probabilities."""

from __future__ import annotations

from dataclasses import replace

from mismatchctl.analysis.diagnose.advice import (
    CODE_PATH_ADVICE,
    FIRST_TURNS_LOCAL_ADVICE,
    PREFILL_ADVICE,
    STEPS_ADVICE,
    attribute_advice,
)
from mismatchctl.analysis.diagnose.cause_evidence import steps_follow_gpu
from mismatchctl.analysis.diagnose.causes import prefill, template
from mismatchctl.analysis.diagnose.causes.hypothesis import Support, worst_of
from mismatchctl.analysis.diagnose.causes.parts import (
    finding_region,
    first_findings,
    on_gpus,
    on_steps_only,
    path_on_one_gpu,
    steps_claim,
    steps_region,
    steps_share,
    where_text,
)
from mismatchctl.analysis.diagnose.causes.processor import mass_removed, sentence
from mismatchctl.analysis.diagnose.check import evidence_of, fired
from mismatchctl.analysis.diagnose.checks import (
    hardware,
    localized,
    policy_signs,
    regimes,
    spikes,
    tool_responses,
    trend,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context, RunView
from mismatchctl.analysis.diagnose.parts import first_turns
from mismatchctl.analysis.diagnose.steps import rising, smooth_growth
from mismatchctl.engines import plan as K
from mismatchctl.stats.cube.spec import CubeSpec

KEY = "code_path"
CLASS = "code path"
LABEL = "a code path some tokens take"
SIGNATURE = (
    "a part of the run hotter than the rest at the same token probabilities: long KV positions "
    "(split-KV or cascade attention), the first tokens of each turn (prefill against decode), "
    "the first turns (the prompt's path), some steps (a replica or a switch at a step), some "
    "engine batches, the samples of one data source"
)
TELLS_APART = (
    "the turns after tool responses all worse alike are the tool turns (no part of them is "
    "hotter than the rest of them); a part on one gpu is the hardware; steps that rise along a "
    "line are a growth; a policy spreads over every part; a part whose mean ratio lacks mass "
    "on one side is a logit processor's (the semantics: processor.py)"
)
EVERY_TOKEN = False
EXPLAINS = ("sequences", "tool_turns", "policy", "growth", "template")
"""``template``: the first tokens after a tool response are the first decoded after the prefill
of the tool output, at long KV positions: a prefill path (chunked prefill, its attention merge)
or a long-KV path makes them a burst as a rendering fault does (``cp-chunk-merge``: 5.5x the
rest of those turns, the first turns' starts, whose prompt is shorter than a chunk, 1.3x), and
a rendering fault's burst is a part the ``localized`` check finds. Neither is a second cause
beside the other; the one that explains more is named. Where the first turns' longer prompts'
starts are hot too (``prefill.py``), the burst is the start of every prefill: the template has
that against it, and the path claims the burst (``_prefills``). A template fault's changed
context also raises every later token of the turns after it, so the tokens past its burst are
no peel of it:
beyond the first 16 of each turn, KV positions 128 and up are 3.3-4.5x the rest in the template
runs alone (``tpl-*``) and 6.0x with a split-KV path beside (``combo-template-splitkv``).

``policy``: a biased kernel leans the responses it hits; the peel (``peel.py``) keeps this only
while no response leans outside the path's part, and a part within the responses (turns, KV
positions) is no part of a policy: the two are named side by side when both stand.

Not ``stop``: a path that grows toward the end of generation (long KV, the small decode batches
at the end) makes the turns' ends hot with the tokens before them, which the stop's sharpness
leaves out (``turn_ends.STOP_SHARP``: 1.8-5.1x their neighbours there, every physical stop fault
100x or more). A stop that stands is its own fault beside a path; a path whose part holds the
ends counts what is left without them (``stop.WITHIN``)."""
CORRECTION = "no: fix or disable the path; importance sampling would only reweight the damage"
READS: tuple[CheckModule, ...] = (
    localized, regimes, spikes, trend, tool_responses, hardware, policy_signs,
)  # fmt: skip

PAST_CONTEXT = (
    "if those positions lie past the context the model was trained on (or its rope scaling's), "
    "the model amplifies every rounding there itself and no kernel is at fault: compare with "
    "the model's trained context before changing kernels"
)
"""Long KV positions are hot for a second reason than a kernel: a model run past the context it
was trained on. The Llama family's healthy run of four or five turns, trained on 192 tokens,
was 1.8x the run at positions 192-255, 4.3x at 256-319, 8.9x past 320 (K3 flat at 2.1e-4 before
192) and was named this path at 3.5x: its two sides compute the same function, which is
unstable there (docs/diagnose.md "Another family"). The data cannot tell it from a split-KV
path; the advice says both."""

POSITION_CONFIG = (
    "the positions' own arithmetic may differ too, not a kernel: compare the rotary embedding "
    "each side builds (its frequencies computed in fp32 on both, the same base and rope "
    "scaling) and the sliding window each side applies"
)
"""Long KV positions are hot when the engine builds the positions otherwise than the trainer
from the same weights, with no kernel at fault: the faults never calibrated on the family's
members (gen/family_unseen.py) put every such one here, named this path: a dynamic NTK rotary
scaling from position 128 (90-354x a healthy run), the rotary frequencies rounded to bf16 as a
model cast whole holds them (the Cohere member 2.9x, its error growing with the distance), a
sliding window ignored (docs/diagnose.md "Faults never calibrated, on other models")."""

PRECISION_TWIN = (
    "without a baseline, a precision loss on every token makes such a mild part too (an fp8 KV "
    "cache: its rounding grows with the keys each token reads): check the engine's KV-cache and "
    "weight dtypes, and diagnose with --baseline (a healthy run of the same stack) to tell "
    "them apart"
)
"""A warning of a part of the KV positions or of the first turns, named without a baseline,
says the precision too. A precision loss alone is a level the run's own noise model cannot see,
but its rounding is not the same everywhere: an fp8 KV cache alone was named this path in three
of thirteen family draws, never over its baseline (the GPT-NeoX member's KV 32-127 at 2.0x the
rest on 67% of the tokens, the GPT-2's first turn at 1.8x on 41% and its earliest positions at
2.5x on 2%, since under ``levels.LOCAL_MIN_SHARE``: docs/diagnose.md "Another family"). The
planted paths' warnings are as mild (a
split-KV merge 3.4-5.3x); the verdict stands and the advice says both."""

PLACES = {
    K.KV_POSITION: "long KV positions (split-KV, flash-decoding or cascade attention)",
    K.TURN_POSITION: "positions within the turns (prefill against decode, long turns)",
    K.STEP: "some steps (a replica, or a path or the weights switched at a step)",
    K.ORDER: "some engine batches (batch shape, batch-variant kernels)",
    K.LENGTH: "sequences of some lengths",
}


def support(ctx: Context) -> Support | None:
    local = ctx.result(localized)
    firsts = [
        f for f in first_findings(local)
        if not on_gpus(f.where) and not (on_steps_only(f.where) and _growth(ctx))
    ]  # fmt: skip
    local_e = evidence_of(local, localized.Evidence)
    later = local_e is not None and local_e.later_turns
    best = None
    if firsts and fired(local) and not later:
        f = firsts[0]
        ci = f.rate_ratio_ci
        # the later turns' excess that the tool check lays at the path's door is the path's too
        tool = ctx.result(tool_responses)
        tool_e = evidence_of(tool, tool_responses.Evidence)
        deferred = (
            [tool] if fired(tool) and tool is not None and tool_e and tool_e.code_path else []
        )
        held = path_on_one_gpu(ctx)
        against = (
            () if held is None else (f"its part lies on gpu {held[0]}'s tokens (the hardware)",)
        )
        against += _past_a_burst(ctx, finding_region(ctx, f.where))
        best = Support(
            against=against,
            verdict=worst_of([local, *deferred]), share=f.excess_share,
            because=local.finding, checks=(localized.NAME, *(c.name for c in deferred)),
            ratio=f.rate_ratio,
            ci=None if ci is None else (ci[0], ci[1]), claim=f.token_share,
            where=where_text(f.where), variant=_variant(f.where),
            region=finding_region(ctx, f.where),
        )  # fmt: skip
    for other in (_steps(ctx), _prefills(ctx)):
        if other is not None and (best is None or _better(other, best)):
            best = other
    if best is None:
        return Support("ok", 0.0, "no part of the run is hotter than the rest", ())
    return _one_signed(ctx, best)


SAME_SHARE = 0.02
"""A localized part that explains the excess within this share of what another part explains
(the elevated steps), on at most half its tokens, is the path's part: a path that runs in most
steps is told by where it runs within them. ``combo-stale-splitkv-mid`` (a split-KV path beside
stale weights, on the model of width 96 made after calibration): turn 2's positions 16-63, 7%
of the tokens, explain 94.4%; its steps 1 and 3-6, 83% of the tokens, 95.8%, the policy's
excess over those steps included. Read as steps, the outside was step 2's 32 responses, too few
to show the lean; read as the later turns' part, the first turns lean 1.74x (p 2e-9) and the
policy is named beside. In the corpus and the held-out one (252 runs), the steps out-explain a
narrower localized part by 0.049 (``gr-rate``), 0.16 (held-out ``cp-batchvar-subtle``) and
more elsewhere: those keep their steps."""


def _better(other: Support, best: Support) -> bool:
    """``other`` explains more than ``best``, unless ``best`` is the narrower part that explains
    as much within ``SAME_SHARE``."""
    gain = (other.share or 0.0) - (best.share or 0.0)
    if gain <= 0:
        return False
    narrower = best.claim is not None and other.claim is not None and best.claim <= other.claim / 2
    return not (narrower and gain <= SAME_SHARE)


PREFILL_STARTS = "the start of every prefill (chunked prefill, a padded or merged prefill)"


def _past_a_burst(ctx: Context, region: dict[str, list[int]] | None) -> tuple[str, ...]:
    """Against the path: its part lies in the turns after tool responses, past their starts,
    and those turns burst at their first tokens as a rendering fault makes them (the template
    alarms, no prefill start beside it: ``template.support``'s evidence stands unopposed). A
    re-rendered context raises every later position of the turns after it (beyond each turn's
    first 16 tokens, KV 128 and up 3.3-4.5x the rest in the ``tpl-*`` runs alone), which is
    the part; the burst is what no long-KV path makes. A template fault on a third of the
    3-layer model's requests: the later turns at KV 64-255 and the burst each explained 95% of
    the excess, and the path led by 1e-5. Empty when the part holds the turns' starts (the
    burst itself, a prefill's).

    A part of KV positions that reaches the first turns too has the burst against it when the
    template explains most of the excess on its own (``BURST_MOST``): the later turns' long
    positions are the template's, the first turns' share of the part another fault's, which
    the peel weighs once the template is named. A re-rendered tool response beside one device
    of four splitting KV a key late past 96 keys (the Granite member's sweep,
    ``s-pair-tpl-gpu``, 125x): KV 64-255 explained 97% (the later turns', and the first turns'
    long positions on the faulty device), the template 81%, and the path was named; no long-KV
    path of any corpus sets off the template unopposed where its part reaches the first turns
    (docs/diagnose.md "A fault's size, swept")."""
    spec = ctx.cube.spec if ctx.cube is not None else None
    if spec is None or not region or K.TURN_POSITION in region:
        return ()
    later = _later_turns_only(spec, region)
    if not later and K.KV_POSITION not in region:
        return ()
    burst = template.support(ctx)
    if burst is None or not burst.alarm or burst.against:
        return ()
    if not later and (burst.share or 0.0) < BURST_MOST:
        return ()
    return (
        "the turns after tool responses burst at their first tokens (the template's "
        "signature, no prefill start beside it): a re-rendered context raises the later "
        "positions of those turns too, which this part "
        + ("is" if later else "holds with the first turns' long positions"),
    )


BURST_MOST = 0.5
"""The template's share of the excess from which a KV part that reaches the first turns has
its burst against it (``_past_a_burst``): most of the excess is the re-rendered turns'."""


def _later_turns_only(spec: CubeSpec, region: dict[str, list[int]]) -> bool:
    """The region lies in the turns after tool responses (the turn kind ``later``, or turns
    other than the first)."""
    for name, label in ((K.TURN_KIND, "first"), (K.TURN, "0")):
        if name not in region:
            continue
        labels = list(spec.dims[spec.index(name)].labels)
        if label in labels and labels.index(label) not in region[name]:
            return True
    return False


def _prefills(ctx: Context) -> Support | None:
    """The burst at the first tokens after each tool response that a rendering fault would make,
    when the first turns' longer prompts' starts are hot too (``prefill.py``): the start of
    every prefill, a prefill path's. It explains what the template would (the burst, and the
    later turns' excess that reads the prefill's keys and values)."""
    burst = template.support(ctx)
    starts = prefill.prefill_starts(ctx) if burst is not None and burst.alarm else None
    if burst is None or starts is None or prefill.sentence(starts) not in burst.against:
        return None
    spec = ctx.cube.spec if ctx.cube is not None else None
    kinds = spec.dims[spec.index(K.TURN_KIND)].labels if spec is not None else ()
    region = (
        {K.TURN_KIND: [kinds.index("later")], K.TURN_POSITION: [0]} if "later" in kinds else None
    )
    return Support(
        verdict=burst.verdict, share=burst.share,
        because=f"{prefill.sentence(starts)}; {_burst_only(burst.because)}", checks=burst.checks,
        ratio=burst.ratio, ci=burst.ci, where=f"{burst.where} and the longer prompts' first 8",
        variant=PREFILL_STARTS, region=region,
    )  # fmt: skip


def _burst_only(finding: str) -> str:
    """The turn_edges finding's numbers, without its reading (a rendering fault's signature)."""
    return finding.split(": the signature of", 1)[0]


def _one_signed(ctx: Context, best: Support) -> Support:
    """Against the path: its part's excess is mass removed on one side (``processor.py``), a
    logit processor's shift, which the semantics names."""
    found = mass_removed(ctx, best)
    if found is None:
        return best
    return replace(best, against=(*best.against, sentence(found)))


def _steps(ctx: Context) -> Support | None:
    """Elevated steps (the spikes or regimes check) that are not a growth."""
    hits = [c for c in (ctx.result(spikes), ctx.result(regimes)) if fired(c)]
    if not hits or _growth(ctx):
        return None
    found = [(*steps_share(view), view) for view in ctx.runs.values()]
    share, steps, view = max(found, key=lambda s: s[0] or 0.0)
    if share is None:
        return None
    against: tuple[str, ...] = ()
    if fired(ctx.result(hardware)) and steps_follow_gpu(ctx, hits):
        against += ("the elevated steps are the hot gpu's: on the other gpus they are not hotter",)
    signs = ctx.result(policy_signs)
    if fired(signs) and signs is not None and signs.finding.startswith("in the elevated"):
        against += ("the elevated steps' responses lean one way: other weights from a step on",)
    return Support(
        verdict=hits[0].verdict, share=share, because=hits[0].finding + _not_a_line(ctx, view),
        checks=tuple(c.name for c in hits), where=f"steps {steps}", variant=PLACES[K.STEP],
        against=against, region=steps_region(view), claim=steps_claim(view),
    )  # fmt: skip


def _not_a_line(ctx: Context, view: RunView) -> str:
    """Why rising steps are no growth: the trend check saw the rise, but one change point fits
    the steps better than the line (``StepTrend.smooth``); empty when the steps do not rise."""
    t = view.trend
    if not fired(ctx.result(trend)) or t is None or not rising(view) or t.smooth:
        return ""
    return (
        f"; the steps rise (x{t.rise:.2g}) but two levels fit them better than a line (weighted "
        f"squared residuals {t.q_change:.3g} against {t.q_line:.3g}): a change at a step, not "
        "a growth"
    )


def _growth(ctx: Context) -> bool:
    """Every run's steps rise along a line (the trend check fired): the growth's, not a path's."""
    return fired(ctx.result(trend)) and all(smooth_growth(v) for v in ctx.runs.values())


def _variant(where: dict[str, str]) -> str:
    if first_turns(where):
        return "the first turns (the prompt's path)"
    attrs = [k for k in where if k.startswith(K.ATTR_PREFIX)]
    if attrs:
        return f"the samples with {attrs[0][len(K.ATTR_PREFIX) :]} {where[attrs[0]]}"
    return next((text for dim, text in PLACES.items() if dim in where), "a part of the run")


def advice(ctx: Context, found: Support) -> str:
    text = _advice(ctx, found)
    twin = found.variant.startswith("the first turns") or found.variant == PLACES[K.KV_POSITION]
    if twin and found.verdict == "warn" and ctx.baseline is None:
        return f"{text}; {PRECISION_TWIN}"
    return text


def _advice(ctx: Context, found: Support) -> str:
    if found.variant == PREFILL_STARTS:
        return PREFILL_ADVICE
    if found.variant.startswith("the first turns"):
        return FIRST_TURNS_LOCAL_ADVICE
    if found.variant.startswith("the samples with "):
        name, _, value = found.variant[len("the samples with ") :].partition(" ")
        return attribute_advice(ctx.label, name, value)
    if found.variant == PLACES[K.STEP]:  # a part of whole steps: what changed there
        return f"{found.where}: {STEPS_ADVICE}"
    if found.variant == PLACES[K.KV_POSITION]:
        return f"{found.where}: {CODE_PATH_ADVICE}; {POSITION_CONFIG}; {PAST_CONTEXT}"
    return f"{found.where}: {CODE_PATH_ADVICE}"
