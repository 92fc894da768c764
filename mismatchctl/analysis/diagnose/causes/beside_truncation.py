"""What stands beside a truncation, over a baseline: the K3 above the healthy noise's positive
tail (``stats/tail_excess.py``), where a truncation renormalised on the rollout side moves no
token, and the lean of the responses there.

A truncation lowers ``r`` on every kept token by its context's log kept mass, so above the
tail it leaves less K3 than the healthy noise does: over their baselines the truncations of every
corpus (top-p, top-k, min-p, bad words; the TinyLM models, the Llama, the Gemma2 and the MoE
families) carry 0-1.2x the baseline's K3 there, none with an interval above 1.2. Another cause
beside it moves ``r`` both ways and fills the tail: weights a checkpoint behind 289-3930x, an
fp8 KV cache 47-118x (``combo-topp-fp8kv``), weights an optimizer step behind 12-15x
(``combo-topp-stale-subtle``), a lag of one RL step on the Llama family 1.6-4x.

Which cause it is, the tail alone cannot say (other weights and a precision loss both fill it).
The responses' lean tells other weights, at a lower gate than on a run alone now that another
cause is shown to be there (``TAIL_LEAN_ALPHA``, ``TAIL_LEAN_DISPERSION``); so do steps that
differ (``steps_beside_truncation``: a precision loss raises every step alike). Without either
nothing is named beside the truncation, and the runner-ups say what the tail holds
(``tail_text``)."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.causes import policy
from mismatchctl.analysis.diagnose.causes.hypothesis import Support
from mismatchctl.analysis.diagnose.causes.varying_level import steps_split, steps_text
from mismatchctl.analysis.diagnose.check import FAIL, OK, WARN
from mismatchctl.analysis.diagnose.checks import baseline, policy_signs
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.analysis.diagnose.contrasts import ci_text, relative
from mismatchctl.stats.localize.result import ratio_text
from mismatchctl.stats.sign_coherence import SignCoherence, tail_coherence
from mismatchctl.stats.tail_excess import TailExcess, tail_excess

TAIL_LEAN_ALPHA = 1e-3
"""Beside a truncation whose tail is filled (``tail_beside``), the sign test on the tokens above
the tail with p under this names other weights. On a run alone the policy needs p < 1e-6
(``policy_signs``): healthy runs' whole-run tests reach p 3e-4, and a truncation alone leans
1.39-1.41 there (p 1.7e-4 to 3.2e-4: min-p), but neither fills the tail. Of the runs whose tail
is filled, an fp8 KV cache beside top-p leans 0.95-1.17 (p 0.05 at best, six runs), weights a
checkpoint behind 1.07-1.80 (p 1e-11 to 0.23: the TinyLM models 1.25-1.80, the Llama family
1.07-1.30)."""

TAIL_LEAN_DISPERSION = 1.3
"""...and the counts' spread at least this many times what independent signs give (the fp8
caches at most 1.17; healthy runs' whole-run tests 0.80-1.11, up to 1.38 at p 3e-4)."""


def tail_beside(ctx: Context) -> TailExcess | None:
    """The run's K3 above the tail over the baseline's at its cells, the worst run's, when it is
    an excess at the ``baseline`` check's thresholds (1.5x, the interval above 1.2); None
    without a baseline's per-sequence sums or under them."""
    view = ctx.baseline
    if view is None or view.sequences is None:
        return None
    t = baseline.T
    best: TailExcess | None = None
    for state in ctx.state.hot_sequences.runs().values():
        found = tail_excess(state, view.sequences)
        if found is None:
            continue
        verdict = relative(found.ratio, found.ci, t.BASELINE_FACTOR, t.BASELINE_CI_LOW,
                           t.BASELINE_FAIL)  # fmt: skip
        if verdict != OK and (best is None or found.ratio > best.ratio):
            best = found
    return best


def lean_beside_truncation(ctx: Context) -> Support | None:
    """Other weights beside a truncation: its tail filled over the baseline (``tail_beside``)
    and the responses leaning there at ``TAIL_LEAN_ALPHA`` and ``TAIL_LEAN_DISPERSION``; the
    worst run's Support, None otherwise."""
    tail = tail_beside(ctx)
    if tail is None:
        return None
    best: SignCoherence | None = None
    for state in ctx.state.hot_sequences.runs().values():
        found = tail_coherence(state)
        if found.tested == 0 or not found.p_value < TAIL_LEAN_ALPHA:
            continue
        if found.dispersion >= TAIL_LEAN_DISPERSION and (
            best is None or found.dispersion > best.dispersion
        ):
            best = found
    if best is None:
        return None
    strong = best.dispersion >= policy_signs.T.SIGN_DISPERSION_FAIL
    return Support(
        verdict=FAIL if strong else WARN,
        share=None,
        because=(
            f"{_tail_sentence(tail)}; there the count of those tokens in each of {best.tested} "
            f"sequences spreads {best.dispersion:.2f}x as much as independent tokens give "
            f"(chi-square p = {best.p_value:.2g}): whole responses lean one way beside the "
            "truncation"
        ),
        checks=(policy_signs.NAME, baseline.NAME),
        ratio=tail.ratio,
        ci=tail.ci,
        where="every token",
        variant="responses leaning one way beside the truncation",
    )


def steps_beside_truncation(ctx: Context) -> Support | None:
    """Other weights beside a truncation whose responses do not lean: its tail filled over the
    baseline (``tail_beside``) and the run's steps split (``varying_level.steps_split``: the
    ``spikes`` or the ``regimes`` check). Another cause
    fills the tail, other weights or a precision loss; a precision loss raises every step alike
    (the fp8 caches beside top-p: the steps within 1.0-1.2x of each other, as every precision
    fault of the corpora), the gap between two sets of weights follows the updates (weights a
    checkpoint behind beside top-p, in every family and draw: step 1 2.3-3.0x the others, where
    the BPE models' responses lean 1.07-1.30 above the truncation, under the gate). None
    otherwise."""
    split = steps_split(ctx)
    tail = tail_beside(ctx) if split is not None else None
    if tail is None or split is None:
        return None
    return Support(
        verdict=split.verdict,
        share=None,
        because=(
            f"{_tail_sentence(tail)}, another cause beside the truncation; {steps_text(split)}"
        ),
        checks=(baseline.NAME, split.name),
        ratio=tail.ratio,
        ci=tail.ci,
        where="every token",
        variant=policy.VARYING,
    )


def tail_text(ctx: Context) -> str | None:
    """What the runner-ups of a truncation say when its tail is filled and nothing is named
    beside it; None when the tail is not filled."""
    tail = tail_beside(ctx)
    if tail is None:
        return None
    return (
        f"{_tail_sentence(tail)}: another cause beside the truncation, other weights or a "
        "precision loss, whose responses do not lean enough to tell which (compare the two "
        "sides' checkpoint versions, then the engine's precision settings)"
    )


def _tail_sentence(tail: TailExcess) -> str:
    return (
        f"above the healthy noise, where a truncation moves no token, the tokens carry "
        f"{ratio_text(tail.ratio)}x the baseline's K3 at the same cells ({ci_text(tail.ci)})"
    )


__all__ = [
    "TAIL_LEAN_ALPHA",
    "TAIL_LEAN_DISPERSION",
    "lean_beside_truncation",
    "steps_beside_truncation",
    "tail_beside",
    "tail_text",
]
