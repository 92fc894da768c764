"""Precision everywhere: a numeric path that is less exact on every token (an fp8 KV cache or fp8
weights, fp16 against bf16, a bf16 lm_head, tensor-parallel reductions across hosts)."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.advice import LOW_PROB_ADVICE
from mismatchctl.analysis.diagnose.causes.hypothesis import Support
from mismatchctl.analysis.diagnose.check import evidence_of, fired
from mismatchctl.analysis.diagnose.checks import (
    baseline,
    low_probability,
    offset,
    policy_signs,
    temperature,
    top_p,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context, baseline_on_other_gpus

KEY = "precision"
CLASS = "precision"
LABEL = "precision everywhere"
SIGNATURE = (
    "against a known-good baseline, an excess spread over every step, turn, position and "
    "probability (or concentrated in the rare tokens: the lm_head's precision), each token "
    "moved independently: no response leans"
)
TELLS_APART = (
    "another policy is as uniform but leans whole responses (policy_signs); without a baseline "
    "a uniform precision loss looks like a healthy run at another level: give --baseline"
)
EVERY_TOKEN = True
EXPLAINS = ("sequences", "tool_turns")
OUTSIDE_ONLY = True
"""Beside a cause of a part of the run, the precision is a second cause only where it stands
outside that part (the second pass, ``outside.py``). Its evidence is a level over the baseline,
and the part's own fault raises that level: its share in the first pass is only what the part
leaves unexplained, a remainder, not an excess measured anywhere (``moe-router-fp8`` over
``h-moe-b``: the flipped tokens hold 74% of the K3 at 27x the others, and the 29% left was named
precision; a flipped expert changes the position's hidden state, which every later token reads
in its keys and values). A part with no outside the second pass can keep (the tokens after a
flipped route, some engine batches) has no precision beside it: the tokens before any flip in
their response, which no flipped route reaches, are 2.1-2.5x a healthy MoE's with the router in
fp8 alone (it rounds every token's gate weights too), so they are no peel of the routing."""
CORRECTION = (
    "a token- or sequence-level importance correction can make an unavoidable precision loss "
    "tolerable; first try the more exact path (bf16 KV cache, an fp32 lm_head)"
)
READS: tuple[CheckModule, ...] = (
    baseline, policy_signs, low_probability, offset, temperature, top_p,
)  # fmt: skip

SHAPES = {
    "uniform": "spread over every part of the run",
    "concentrated": "in the rare tokens",
}


def support(ctx: Context) -> Support | None:
    base, signs, low = ctx.result(baseline), ctx.result(policy_signs), ctx.result(low_probability)
    if base is None or base.verdict == "n/a":
        if not fired(low) or low is None:
            return None  # without a baseline, a uniform loss is a level, not a shape
        return Support(  # the low-probability trap: most of the K3 on the rare tokens
            verdict=low.verdict, share=None, because=low.finding, checks=(low_probability.NAME,),
            where="the rare tokens", variant=SHAPES["concentrated"],
        )  # fmt: skip
    e = evidence_of(base, baseline.Evidence)
    shape = e.excess_shape if e is not None else None
    against: tuple[str, ...] = ()
    if fired(signs):
        against += ("whole responses lean one way (policy_signs): another policy, not noise",)
    semantic = [c.name for c in (ctx.result(offset), ctx.result(temperature), ctx.result(top_p))
                if fired(c) and c is not None]  # fmt: skip
    if baseline_on_other_gpus(ctx) is not None:
        against += ("the baseline ran on other gpus: their kernels differ (the hardware)",)
    if semantic:
        against += (f"the sides compute different distributions ({', '.join(semantic)}): a "
                    "deterministic transform, not noise",)  # fmt: skip
    seen = fired(base) and shape in SHAPES
    ratio, ci = (e.rate_ratio, e.rate_ratio_ci) if e is not None else (None, None)
    return Support(
        verdict=base.verdict if seen else "ok",
        share=None,
        because=base.finding,
        checks=(baseline.NAME,),
        ratio=ratio,
        ci=None if ci is None else (ci[0], ci[1]),
        where="every token" if shape != "concentrated" else "the rare tokens",
        variant=SHAPES.get(shape or "", ""),
        against=against,
    )


def advice(ctx: Context, found: Support) -> str:
    other = baseline_on_other_gpus(ctx)
    text = (
        "the run is less exact than the baseline on every token, each moved on its own: look "
        "for a lower-precision path on the engine side (an fp8 KV cache, an fp8-quantized "
        "model, fp16 activations, a bf16 lm_head, tensor parallelism across hosts) and "
        "diagnose a few steps with it switched back"
    )
    if found.variant == SHAPES["concentrated"]:
        text += f"; {LOW_PROB_ADVICE}"
    else:
        text += (
            "; a policy mismatch too faint to lean the responses visibly gives the same "
            "picture: compare the two sides' checkpoint versions as well"
        )
    if other is not None:
        text += (
            f"; the run ran on {', '.join(other[0])} and the baseline on {', '.join(other[1])}: "
            "another gpu generation's kernels look the same (compare on the same gpus)"
        )
    return text
