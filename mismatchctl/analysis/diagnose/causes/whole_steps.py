"""Some steps hot at every position of their responses: other weights, another sampling or
another arithmetic at those steps, not a code path that some of their tokens take.

A code path that only some steps take (a kernel chosen by the batch's shape or the KV length, a
merge of split attention, a prefill path) runs on some tokens of those steps: within the steps
it names, a part of the responses is hotter than the rest of them at the same token
probabilities. Every code path and growth of the corpora whose part named first was some steps
holds one (the first or the later turns at 2.8-160x the others of those steps, a KV range
3.2-7.0x, the first 16 positions of the turns): split-KV merges alone and beside a template,
a lag or stale weights, in every family and both MoE draws, and a rate that grows. Other
weights raise every position of a response alike at the same token probabilities (``peel.py``):
every policy of the corpora whose part named first was some steps holds none (stale weights
whose first step stands 2.1-2.7x the others, in the TinyLM, Llama, Gemma2, Qwen3, GPT-NeoX and
MoE families and on long responses; a partial sync of the lm_head; a layer left behind by a
reload at mid-run; stale weights beside the MoE's fp8 router). Without a baseline the level of
the other steps is not seen (``varying_level.py`` reads it over one), so the step stood as a
part of its own: a code path of that step, whose advice looked first at the engine.

So a code path of some steps named first, whose steps hold no part within their responses
hotter than the rest of them, nor responses of some lengths, engine batches or gpus
(``step_change.placed``: each value of each dimension of its ``WITHIN`` against the others of those steps at
the same token probabilities, at the ``localized`` check's pattern, ``hotter``), is named by
what changed there (``step_change.py``): the sampling when mass is removed there (``semantics``,
"a sampling setting changed at some steps"), the weights when token ids moved on their own
(``policy``, "other weights at some steps"), else the engine's arithmetic (a kernel every token
takes, a restart with another precision: the code path of those steps stays, its evidence
saying so). Its part and share are the steps'. A cause already named beside it is the same
cause, named once with both findings (``by_change``: the second Gemma2 draw's stale weights,
step 1 hot throughout and the other steps leaning, were a code path of step 1 with the policy
beside).

**Beside another cause** (``beside``): when the ``spikes`` or the ``regimes`` check splits the
run's steps (``varying_level.steps_split``) and the elevated steps are hot throughout with ids
moved on their own, the policy is named beside whatever was named first. Of every diagnosis of
the corpora with the steps split and neither the policy nor a part of those steps named, the
elevated steps are hot throughout in exactly the fifteen where weights a checkpoint behind sit
beside top-p, without a baseline (the TinyLM's deep and mid models in three draws, the Llama's
three, Gemma2's two, Qwen3's two, GPT-NeoX's two: step 1 2.3-3.0x the others, the responses
leaning too little to name the policy above the truncation); over a baseline the filled tail
names it (``beside_truncation.py``). In the 68 others (split-KV merges, batch-variant kernels,
a padded prefill, growths, a stop token's 0.0, a template beside a path) a part within the
steps is hotter. Beside a logit transform the ids' own shifts are the transform's too (top-p
0.9 alone carries 19% of ``r``'s variance), so there a split hot throughout names the weights
whatever the share: an engine whose arithmetic changed at a step beside a truncation would be
taken for them (no corpus has one)."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.causes import policy, semantics
from mismatchctl.analysis.diagnose.causes.hypothesis import Support, Weighed
from mismatchctl.analysis.diagnose.causes.parts import steps_region, steps_share
from mismatchctl.analysis.diagnose.causes.step_change import placed, step_change
from mismatchctl.analysis.diagnose.causes.varying_level import steps_part, steps_split
from mismatchctl.analysis.diagnose.check import worst
from mismatchctl.analysis.diagnose.context import Context


def whole_steps(ctx: Context, path: Weighed | None) -> Weighed | None:
    """What changed at the steps of a code path of some steps (``path``) whose steps are hot
    throughout their responses (the module's docstring; ``step_change.py``: the weights, the
    sampling or the arithmetic); None otherwise."""
    if path is None or not steps_part(path) or ctx.cube is None:
        return None
    region = path.support.region or {}
    found = placed(ctx, region)
    if found is None:
        return None
    change = step_change(ctx, region)
    s = path.support
    support = Support(
        verdict=s.verdict,
        share=s.share,
        because=(
            f"{s.because}; within those steps no part is hotter than the rest at the same token "
            f"probabilities (of {found}): their responses are hot throughout; {change.because}"
        ),
        checks=s.checks,
        ratio=s.ratio,
        ci=s.ci,
        claim=s.claim,
        where=s.where,
        variant=change.variant,
        region=s.region,
        against=s.against if change.cause.KEY == path.cause.KEY else (),
    )
    return Weighed(change.cause, support, path.score)


def by_change(
    ctx: Context, first: Weighed | None, also: list[Weighed]
) -> tuple[Weighed | None, list[Weighed]]:
    """The causes named, each code path of some steps hot throughout named by what changed
    there (``whole_steps``). A cause already named beside it is the same cause: one, its
    evidence both findings (the policy found outside the steps, leaning there, and the steps
    that stand out: stale weights whose step 1 stands out of a lean elsewhere); a path beside a
    first cause that its steps turn out to be is that cause's own finding, no second cause."""
    moved = whole_steps(ctx, first)
    if first is not None and moved is not None:
        same = next((w for w in also if w.cause.KEY == moved.cause.KEY), None)
        first = moved if same is None else _merged(moved, same)
        also = [w for w in also if w.cause.KEY != moved.cause.KEY]
    kept = []
    for w in also:
        m = whole_steps(ctx, w)
        if m is not None and first is not None and m.cause.KEY == first.cause.KEY:
            continue  # the first cause's own steps
        kept.append(w if m is None or any(x.cause.KEY == m.cause.KEY for x in also) else m)
    return first, kept


def _merged(steps: Weighed, same: Weighed) -> Weighed:
    """One cause from its steps' finding and the same cause's finding elsewhere: both
    sentences, the shares added (each the excess of its own tokens)."""
    s = steps.support
    share = min(1.0, (s.share or 0.0) + (same.support.share or 0.0))
    support = Support(
        **{
            **s.__dict__,
            "share": share,
            "because": f"{s.because}; {same.support.because}",
            "checks": tuple(dict.fromkeys((*s.checks, *same.support.checks))),
            "verdict": worst([s.verdict, same.support.verdict]),
        }
    )
    return Weighed(steps.cause, support, max(steps.score, same.score))


AT_STEPS = (policy.AT_STEPS, semantics.AT_STEPS)


def runner_up(first: Weighed | None, w: Weighed) -> str | None:
    """Why the code path of the steps lost to what changed there (None: ``w`` is no such
    path)."""
    if first is None or first.support.variant not in AT_STEPS or not steps_part(w):
        return None
    return (
        "the same steps, hot throughout their responses: no part within them that a code path "
        f"would take, so named by what changed there ({first.cause.LABEL})"
    )


def beside(ctx: Context, first: Weighed | None, also: list[Weighed]) -> Weighed | None:
    """The policy beside the cause named first when the run's steps split and the elevated
    steps are hot throughout their responses (the module's docstring); None otherwise."""
    split = steps_split(ctx)
    if first is None or split is None or ctx.cube is None:
        return None
    if any(steps_part(w) for w in (first, *also)):
        return None  # the steps are named as a part (``whole_steps`` weighed it)
    if policy.KEY in {first.cause.KEY, *(w.cause.KEY for w in also)}:
        return None
    for view in ctx.runs.values():
        region = steps_region(view)
        found = None if region is None else placed(ctx, region)
        if found is None or region is None:
            continue
        change = step_change(ctx, region)
        if change.cause is not policy:
            return None  # only other weights are named beside: see the module's docstring
        share, steps = steps_share(view)
        support = Support(
            verdict=split.verdict,
            share=share,
            because=(
                f"{split.finding}; within those steps no part is hotter than the rest at the "
                f"same token probabilities (of {found}): their responses are hot throughout, "
                f"beside {first.cause.LABEL}; {change.because}"
            ),
            checks=(split.name,),
            where=f"steps {steps}",
            variant=policy.AT_STEPS,
            region=region,
        )
        return Weighed(policy, support, share or 0.0)
    return None


__all__ = ["AT_STEPS", "beside", "by_change", "runner_up", "whole_steps"]
