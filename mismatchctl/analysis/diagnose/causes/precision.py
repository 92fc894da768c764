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
    token_shift,
    top_p,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context, baseline_on_other_gpus
from mismatchctl.stats import routing_sums as R

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
in its keys and values). A part with no outside the second pass can keep (some engine batches)
has no precision beside it. The flips' outside is the tokens before any flip in their response,
which no flipped route reaches: they are 2.1-2.5x a healthy MoE's with the router in fp8 alone
(it rounds every token's gate weights too), so at the ``baseline`` check's warning they are no
peel of the routing; beside the flips the precision is named from them at its fail level
(``beside_flips``)."""

FLIP_FREE_FACTOR = baseline.T.BASELINE_FAIL
"""Beside MoE routing flips, the tokens before any flip in their response (no flipped route
reaches them) over the baseline's same tokens: a router rounded to fp8 raises them itself, its
gate weights rounded on every token (``moe-router-fp8`` 2.1x and 2.2x in the two corpora,
``moe-router-e5m2`` 2.5x over ``h-moe-b``; healthy MoE runs 0.89-1.14x), so a precision loss
beside it is named from the ``baseline`` check's fail level, 5x (``combo-router-fp8kv``, an fp8
router and an fp8 KV cache: 7.9x)."""
MIX_SHIFT = baseline.T.MIX_SHIFT
"""The advice says the two runs sample other distributions past the ``baseline`` check's
``MIX_SHIFT``: a uniform excess under its ``TEMPERATURE_K3`` there is no alarm at all; above
it the verdict stands and the advice says a lower temperature alone would not make so much."""
CORRECTION = (
    "a token- or sequence-level importance correction can make an unavoidable precision loss "
    "tolerable; first try the more exact path (bf16 KV cache, an fp32 lm_head)"
)
SEMANTIC: tuple[CheckModule, ...] = (offset, temperature, top_p, token_shift)
"""The checks whose alarm says the two sides compute different distributions: a deterministic
transform, evidence against noise. A logit processor on one side is one (``token_shift``): a
repetition penalty of 1.02 on the 8192-token family was 8.6x its baseline, uniform, and named
precision over it by the tie-break (the interval), semantics alone (docs/diagnose.md "Another
family"); ``sem-bias-subtle`` over ``h-b`` of the seed-29 catalogue the same."""
READS: tuple[CheckModule, ...] = (baseline, policy_signs, low_probability, *SEMANTIC)

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
    semantic = [c.name for c in (ctx.result(m) for m in SEMANTIC) if fired(c) and c is not None]
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


def beside_flips(ctx: Context) -> Support | None:
    """The precision beside MoE routing flips: the K3 rate of the tokens before any flip in
    their response against the baseline's same tokens, at ``FLIP_FREE_FACTOR`` or more in the
    worst run without replay; None without a baseline with routes or under it."""
    theirs = ctx.baseline.routing if ctx.baseline is not None else None
    base = theirs.get(R.VLLM_KL_BEFORE_FLIP) if theirs else None
    if not base or baseline_on_other_gpus(ctx) is not None:
        return None
    rates = [x.metrics.get(R.VLLM_KL_BEFORE_FLIP) for x in ctx.report.routing.values()
             if not x.replay]  # fmt: skip
    found = max((float(r) for r in rates if r is not None), default=None)
    if found is None or found / float(base) < FLIP_FREE_FACTOR:
        return None
    ratio = found / float(base)
    return Support(
        verdict="fail",
        share=None,
        because=(
            f"the tokens before any routing flip in their response, which no flipped route "
            f"reaches, are {ratio:.2g}x the baseline's same tokens ({found:.3g} against "
            f"{float(base):.3g}; a router rounded to fp8 raises them itself, under "
            f"{FLIP_FREE_FACTOR:g}x): a precision loss on every token beside the flips"
        ),
        checks=(baseline.NAME,),
        ratio=ratio,
        where="the tokens before any routing flip",
        variant="an excess over the baseline where no flipped route reaches",
    )


def advice(ctx: Context, found: Support) -> str:
    other = baseline_on_other_gpus(ctx)
    text = (
        "the run is less exact than the baseline on every token, each moved on its own: look "
        "for a lower-precision path on the engine side (an fp8 KV cache, an fp8-quantized "
        "model, fp16 activations, a bf16 lm_head, tensor parallelism across hosts) and "
        "diagnose a few steps with it switched back"
    )
    if ctx.report.routing:
        text += (
            "; in an MoE, the routers' logits in lower precision too (rounding them moves every "
            "token's gate weights and flips routes)"
        )
    if found.variant == SHAPES["concentrated"]:
        text += f"; {LOW_PROB_ADVICE}"
    else:
        text += (
            "; a policy mismatch too faint to lean the responses visibly gives the same "
            "picture: compare the two sides' checkpoint versions as well"
        )
    shift = mix_shift(ctx)
    if shift is not None and abs(shift) > MIX_SHIFT:
        text += (
            f"; the run's token probabilities are not the baseline's (their mix alone moves its "
            f"level {shift:+.0%}): it samples another distribution; at a lower sampling "
            "temperature than the baseline's every token's K3 grows as 1/T^2 (both sides divide "
            f"the logits by T), up to {baseline.T.TEMPERATURE_K3:g}x between 0.6 and 1.0, so "
            "compare with a baseline sampled at the run's temperature"
        )
    if other is not None:
        text += (
            f"; the run ran on {', '.join(other[0])} and the baseline on {', '.join(other[1])}: "
            "another gpu generation's kernels look the same (compare on the same gpus)"
        )
    return text


def mix_shift(ctx: Context) -> float | None:
    """The ``baseline`` check's mix term (``MIX_SHIFT``); None without a baseline or its
    decomposition."""
    e = evidence_of(ctx.result(baseline), baseline.Evidence)
    return baseline.mix_shift(e) if e is not None else None
