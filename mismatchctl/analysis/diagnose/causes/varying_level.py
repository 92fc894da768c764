"""A level over the baseline that varies from step to step is other weights, not a precision
loss.

A precision loss is a property of the engine's arithmetic (its KV cache's format, its kernels'
accumulators, its norms): it raises every step alike. Over their baselines the precision faults
of every corpus (fp8 KV caches and weights, bf16 accumulators, the norms' epsilon, the softmax
scale, int8 and int4 MLPs, saturating activations; the TinyLM models and the Llama, Gemma2,
Qwen3, GPT-NeoX and MoE families) keep their steps within 1.0-1.2x of each other: the ``spikes``
check is quiet on every one. The gap between two sets of weights follows the updates between
them, larger where training moves fast: the stale weights of every family put step 1 at 2.1-2.7x
the others over a level 94-225x their baselines, with no response leaning on the BPE models, so
the level was named a precision loss (its signature: uniform, no lean) or, where step 1 stood
out from the level, a code path of that step.

So over a baseline, when the level named first (the precision, uniform) or a part of some
steps named first whose other steps hold half the excess at their level (``LEVEL_SHARE``, as
``outside.level_over_part`` weighs a level) has its steps split by the ``spikes`` or the
``regimes`` check (``steps_split``: the second Gemma2 draw's stale weights beside top-p split
in two regimes, steps 1 and 2 at 2.1x), the policy is named, the split its own finding:
other weights whose gap varies with the training, when the steps that stand out changed by
their weights (``step_change.weights_at``: hot throughout, token ids moved on their own; an fp8
cache beside a kernel from a step on varies too, its steps moving none). Not when another part
of the run alarms beside the steps (a template's or a path's excess in the other steps is no level:
``f-combo-tpl-splitkv`` holds 23-41% there), nor when the responses lean (the policy is then
named by its own check)."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.causes import policy, precision
from mismatchctl.analysis.diagnose.causes.hypothesis import Support, Weighed
from mismatchctl.analysis.diagnose.causes.outside import LEVEL_SHARE
from mismatchctl.analysis.diagnose.causes.parts import steps_region
from mismatchctl.analysis.diagnose.causes.step_change import ID_WEIGHTS, weights_at
from mismatchctl.analysis.diagnose.check import Check, evidence_of, fired
from mismatchctl.analysis.diagnose.checks import baseline, regimes, spikes, token_shift
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.analysis.diagnose.contrasts import ci_text
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.engines import plan as K
from mismatchctl.stats.localize.explain import contrast_baseline
from mismatchctl.stats.localize.result import ratio_text

CODE_PATH = "code_path"


def steps_split(ctx: Context) -> Check | None:
    """The check that splits the run's steps into a few isolated ones and the others
    (``spikes``) or into two regimes or a step change (``regimes``), whichever fired first;
    None when the steps are one regime (every precision fault of the corpora: within
    1.0-1.2x)."""
    return next((c for c in (ctx.result(spikes), ctx.result(regimes)) if fired(c)), None)


def steps_text(split: Check) -> str:
    """What the steps' split says: its finding, and why it is other weights'."""
    return (
        f"{split.finding}: a precision loss raises every step alike, the gap between two sets "
        "of weights follows the updates between them"
    )


def steps_part(w: Weighed) -> bool:
    """A code path of some steps: the split itself, which the policy's gap varying from step
    to step explains (no second cause beside it)."""
    return w.cause.KEY == CODE_PATH and set(w.support.region or {}) == {K.STEP}


def varying_level(ctx: Context, first: Weighed | None, alarmed: list[Weighed]) -> Weighed | None:
    """The policy for the level named first over a baseline when the ``spikes`` or ``regimes``
    check splits its steps (the module's docstring); None otherwise."""
    split = steps_split(ctx)
    if first is None or ctx.baseline is None or split is None:
        return None
    found = next((w for w in alarmed if w.cause.KEY == policy.KEY), None)
    if found is not None and found.support.alarm:
        return None  # the responses lean: the policy is weighed on its own check
    if not _split_by_weights(ctx):
        return None  # the steps that stand out are a path's or the arithmetic's
    level = _level(ctx, first, alarmed)
    if level is None:
        return None
    share, text = level
    support = Support(
        verdict=first.support.verdict,
        share=share,
        because=(f"{text}; {steps_text(split)}"),
        checks=(baseline.NAME, split.name),
        where="every token",
        variant=policy.VARYING,
    )
    return Weighed(policy, support, first.score)


def varying_second(ctx: Context, w: Weighed, alarmed: list[Weighed]) -> Weighed:
    """A precision named beside a part (outside it, or before any routing flip) whose run's
    steps the ``spikes`` check splits is the policy, as a level named first is (the MoE
    family's stale weights beside their routing flips, step 1 2.1-2.4x the others: named
    ``routing`` + ``precision``); the precision beside a gpu's fault or a template, the same at
    every step in every corpus, stays. Only the ``spikes`` check's split counts here: the
    regimes of a part named first follow its own batches (a split-KV path in the MoE with
    replay: five of six steps at 45x, the precision beside it as spurious as a policy would
    be). ``w`` itself otherwise."""
    split = ctx.result(spikes)  # a few isolated steps: regimes follow a path's batches too
    if w.cause.KEY != precision.KEY or ctx.baseline is None or not fired(split) or split is None:
        return w
    if any(x.cause.KEY == policy.KEY and x.support.alarm for x in alarmed):
        return w
    if not _split_by_weights(ctx):
        return w
    support = Support(
        **{
            **w.support.__dict__,
            "because": (f"{w.support.because}; {steps_text(split)}"),
            "checks": (*w.support.checks, split.name),
            "variant": policy.VARYING,
        }
    )
    return Weighed(policy, support, w.score)


def split_unread(ctx: Context, first: Weighed | None) -> str | None:
    """Why the policy lost where its twin was named (a precision loss, uniform, or a code path of
    some steps): the steps split as other weights' gap following the training splits them, but
    no token id moved on its own beyond what the engine's arithmetic moves (``weights_at``), so
    the split is not read as the weights'. The Cohere member's weights 0.1-0.5 of an RL step
    behind (docs/diagnose.md "A fault's size, swept"): step 1 at 2.2x the others, the ids'
    own shifts 0.35-0.46% of ``r``'s variance. None when there is no split, the split was read
    as the weights', or the first cause is not the twin."""
    if first is None or not (first.cause is precision or steps_part(first)):
        return None
    split = steps_split(ctx)
    if split is None or _split_by_weights(ctx):
        return None
    e = evidence_of(ctx.result(token_shift), token_shift.Evidence)
    share = "n/a" if e is None or e.id_share is None else pct(e.id_share)
    return (
        f"the steps split ({split.finding}) as the gap between two sets of weights follows the "
        f"updates, but each token id's own shift carries {share} of r's variance (under "
        f"{ID_WEIGHTS:.1%}), no more than the engine's arithmetic moves them: the data cannot "
        "tell other weights from the arithmetic changed at those steps (compare the checkpoint "
        "versions the two sides ran)"
    )


def _split_by_weights(ctx: Context) -> bool:
    """Whether the steps the split elevates changed by their weights (``step_change.weights_at``:
    hot throughout, token ids moved on their own): not a path some of their tokens take, nor
    the engine's arithmetic changed at a step beside a precision loss everywhere
    (``un-fp8kv-splitkv-restart``: an fp8 KV cache at every step, a faulty kernel on every token
    from step 4 on, whose ids move on their own 0.1%). The stale weights the rule names carry
    0.71-2.1%."""
    regions = [r for r in (steps_region(v) for v in ctx.runs.values()) if r is not None]
    return any(weights_at(ctx, r) for r in regions)


def _level(ctx: Context, first: Weighed, alarmed: list[Weighed]) -> tuple[float | None, str] | None:
    """The level's share of the run's mass and its sentence: the precision named first, or the
    other steps beside a part of some steps named first, at ``LEVEL_SHARE`` of the excess."""
    e = evidence_of(ctx.result(baseline), baseline.Evidence)
    rho = e.rate_ratio if e is not None else None
    if rho is None or not rho > 1:
        return None
    if first.cause.KEY == precision.KEY:
        if first.support.variant != precision.SHAPES["uniform"]:
            return None
        return first.support.share, f"every step over the baseline ({first.support.because})"
    region = first.support.region or {}
    if first.cause.KEY != CODE_PATH or set(region) != {K.STEP}:
        return None
    if any(w is not first and not w.cause.EVERY_TOKEN for w in alarmed):
        return None  # another part alarms: the other steps' excess may be its own
    view = ctx.baseline
    if view is None or view.cube is None or ctx.cube is None:
        return None
    spec = ctx.cube.spec
    rest = [c for c in range(spec.levels(spec.index(K.STEP))) if c not in region[K.STEP]]
    found = contrast_baseline(ctx.cube, view.cube, {K.STEP: rest}, K.BIN) if rest else None
    if found is None:
        return None
    out, ci = found
    held = (out - 1) / (rho - 1)
    if not out > 1 or held < LEVEL_SHARE:
        return None
    return (out - 1) / rho, (
        f"the steps other than {first.support.where.removeprefix('steps ')}: "
        f"{ratio_text(out)}x the baseline's rate at the same token mix ({ci_text(ci)}), at "
        f"which level every token holds {pct(held)} of the excess over the baseline"
    )


__all__ = [
    "split_unread",
    "steps_part",
    "steps_split",
    "steps_text",
    "varying_level",
    "varying_second",
]
