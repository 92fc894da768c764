"""Some steps hot at every position of their responses are other weights at those steps, not a
code path that those steps take.

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
(``placed``: each value of each dimension of ``WITHIN`` against the others of those steps at
the same token probabilities, at the ``localized`` check's pattern, ``hotter``), is
named ``policy`` (``policy.AT_STEPS``), its part and share the steps'. Not when the policy is
already named beside it (the steps are then the path's, the responses leaning outside them the
policy's: ``combo-stale-splitkv-subtle-mid``)."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.causes import policy
from mismatchctl.analysis.diagnose.causes.hypothesis import Support, Weighed
from mismatchctl.analysis.diagnose.causes.varying_level import steps_part
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.analysis.diagnose.contrasts import hotter
from mismatchctl.analysis.diagnose.levels import LEVEL
from mismatchctl.engines import plan as K
from mismatchctl.stats.localize.explain import contrast_within

WITHIN = {
    K.TURN_KIND: "turn kinds",
    K.TURN: "turns",
    K.KV_POSITION: "KV ranges",
    K.TURN_POSITION: "ranges of positions in the turn",
    K.LENGTH: "response lengths",
    K.DUMP_ORDER: "engine batches",
    K.BATCH_SIZE: "batch sizes",
    K.GPU: "gpus",
}
"""The dimensions that cut a step's tokens into parts a code path could take (within the
responses) or a step's responses into parts a path or a replica could serve (lengths, engine
batches, gpus), and what the user reads of each."""


def whole_steps(ctx: Context, first: Weighed | None, also: list[Weighed]) -> Weighed | None:
    """The policy for a code path of some steps named first whose steps are hot throughout
    their responses (the module's docstring); None otherwise."""
    if first is None or not steps_part(first) or ctx.cube is None:
        return None
    if any(w.cause.KEY == policy.KEY for w in also):
        return None
    region = first.support.region or {}
    found = placed(ctx, region)
    if found is None:
        return None
    s = first.support
    support = Support(
        verdict=s.verdict,
        share=s.share,
        because=(
            f"{s.because}; within those steps no part is hotter than the rest at the same token "
            f"probabilities (of {found}): their responses are hot throughout, as other weights "
            "make them, where a code path runs on some tokens"
        ),
        checks=s.checks,
        ratio=s.ratio,
        ci=s.ci,
        claim=s.claim,
        where=s.where,
        variant=policy.AT_STEPS,
        region=s.region,
    )
    return Weighed(policy, support, first.score)


def placed(ctx: Context, region: dict[str, list[int]]) -> str | None:
    """None when, within ``region`` (the steps), a value of one of the ``WITHIN`` dimensions is
    hotter than the others there at the same token probabilities; else what was tested ("2 turn
    kinds, 3 turns, 4 KV ranges, ..."). None too when nothing could be tested."""
    cube = ctx.cube
    assert cube is not None
    spec = cube.spec
    names = {d.name for d in spec.dims}
    tested = []
    for dim in WITHIN:
        if dim not in names:
            continue
        d = spec.index(dim)
        found = [
            contrast_within(cube, region, dim, [c], K.BIN, LEVEL) for c in range(spec.levels(d))
        ]
        if any(hotter(f) for f in found):
            return None
        if n := sum(f is not None for f in found):
            tested.append(f"{n} {WITHIN[dim]}")
    return ", ".join(tested) or None


__all__ = ["placed", "whole_steps"]
