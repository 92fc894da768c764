"""Another policy: the engine sampled with weights that are not the trainer's (stale weights, a
weight sync that did not land or landed in part, another checkpoint, a reload gone wrong)."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.advice import POLICY_SIGNS_ADVICE, STALE_ADVICE
from mismatchctl.analysis.diagnose.causes.hypothesis import Support, worst_of
from mismatchctl.analysis.diagnose.causes.parts import steps_share
from mismatchctl.analysis.diagnose.causes.semantics import far_line, ids_explain
from mismatchctl.analysis.diagnose.causes.sequences import hot_requests
from mismatchctl.analysis.diagnose.check import FAIL, WARN, evidence_of, fired
from mismatchctl.analysis.diagnose.checks import (
    baseline,
    hot_sequences,
    offset,
    policy_signs,
    staleness,
    temperature,
    token_shift,
    top_p,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.stats.hot_sequences import TAIL_RATIO
from mismatchctl.stats.sign_coherence import SignCoherence, tail_coherence

KEY = "policy"
CLASS = "policy"
VARYING = "other weights: a level over the baseline that varies from step to step"
"""The variant ``varying_level.py`` names (it lives here, with the advice it selects)."""
AT_STEPS = "other weights at some steps: their responses hot throughout"
"""The variant ``whole_steps.py`` names."""
DRIFTING = "other weights: token ids moved on their own, drifting with the training"
"""The variant ``drift.py`` names."""
LABEL = "another policy (stale, wrong or differently quantized weights)"
SIGNATURE = (
    "r of both signs at every position, turn and probability, whole responses leaning one way "
    "(the update between the two policies raised or lowered each response: the count of r > 0 "
    "per sequence spreads beyond independent signs), or two full distributions far apart with "
    "no transform's shape (a mean r that is their KL divergence, the mean ratio 1); against a "
    "baseline, a uniform excess"
)
TELLS_APART = (
    "precision noise is as uniform but moves each token independently (no lean); a biased "
    "kernel leans the responses it hits too, but only those (a part of the run is hotter); a "
    "partial weight sync looks like stale weights, smaller: the dumps cannot tell which "
    "parameters lag (compare the weights themselves); weights quantized on one side (fp8 "
    "weights or lm_head) are other weights too: the same picture"
)
EVERY_TOKEN = True
EXPLAINS = ("sequences", "tool_turns", "growth", "precision")
"""A lag that differs from step to step or from replica to replica makes whole responses
hotter (some steps, some sequences: ``pol-stale-ckpt``'s steps 1-2 at 2.0x the others), so a
code path of such a part is no second cause beside a policy; a code path's part within the
responses is (``peel.py``: other weights raise every position alike at the same token
probabilities). A uniform excess over a baseline is the policy's own evidence, not a
precision loss's."""
CORRECTION = (
    "only for a known lag (asynchronous RL by design: an off-policy correction such as "
    "decoupled PPO); never for a wrong or half-synced checkpoint"
)
READS: tuple[CheckModule, ...] = (
    policy_signs, staleness, baseline, hot_sequences, offset, temperature, top_p, token_shift,
)  # fmt: skip


def support(ctx: Context) -> Support | None:
    signs, stale, base = (ctx.result(c) for c in (policy_signs, staleness, baseline))
    hits = [c for c in (stale, signs) if fired(c)]
    if not hits:
        return far_apart(ctx) or Support(
            "ok", 0.0, "no response leans, no weight lag", _names(signs, stale)
        )
    lead = hits[0]
    shape = e.excess_shape if (e := evidence_of(base, baseline.Evidence)) is not None else None
    uniform = fired(base) and base is not None and shape == "uniform"
    jump = lead is signs and signs is not None and lead.finding.startswith("in the elevated")
    share, where = None, "every token"
    requests = _some_requests(ctx)
    if requests:  # the lean is those requests': the sequences' cause claims them, not this
        share = 0.0
    if jump:  # the whole run's responses do not lean, the elevated steps' do
        share, steps = max((steps_share(v) for v in ctx.runs.values()), key=lambda x: x[0] or 0)
        where = f"steps {steps}"
    return Support(
        against=_by_ids(ctx) + requests,
        verdict=worst_of([*hits, base if uniform else None]),
        share=share,
        because=lead.finding,
        checks=_names(*hits, base if uniform else None),
        where=where,
        variant="stale weights"
        if lead is stale
        else "weights that changed at a step"
        if jump
        else "responses leaning one way",
    )


def lean_above_truncation(ctx: Context) -> Support | None:
    """The responses' lean where a truncation cannot reach: the sign test on each sequence's
    tokens with ``r`` above ``TAIL_RATIO`` of their ``|lr|`` (``stats.sign_coherence.
    tail_coherence``), at the ``policy_signs`` check's thresholds; the worst run's Support, None
    when none leans there. A truncation renormalised on the rollout side lowers ``r`` on every
    kept token: the sign test about zero reads few positive signs (``combo-topp-stale``, top-p
    beside a checkpoint behind: 72% of the tokens below zero, 1.37), and about each bin's median
    it leans with the kept mass. Above the healthy noise it moves no token up: the truncations
    of the corpus lean 0.81-1.41 there (p 1.4e-4 at best), its healthy and improved runs
    0.84-1.37 (1.36 in the held-out corpus), while ``combo-topp-stale`` leans 1.77 (1.72 in the
    held-out corpus) and a checkpoint behind alone 2.97."""
    t = policy_signs.T
    best: SignCoherence | None = None
    for state in ctx.state.hot_sequences.runs().values():
        found = tail_coherence(state)
        if found.tested == 0 or not found.p_value < t.SIGN_ALPHA:
            continue
        if found.dispersion >= t.SIGN_DISPERSION_WARN and (
            best is None or found.dispersion > best.dispersion
        ):
            best = found
    if best is None:
        return None
    return Support(
        verdict=FAIL if best.dispersion >= t.SIGN_DISPERSION_FAIL else WARN,
        share=None,
        because=(
            f"above the healthy noise (r over {TAIL_RATIO:g} of |lr|), where a truncation moves "
            f"no token: the count of those tokens in each of {best.tested} sequences spreads "
            f"{best.dispersion:.2f}x as much as independent tokens give (chi-square p = "
            f"{best.p_value:.2g}; {pct(best.extreme_share)} at |z| > 3): whole responses lean "
            "one way beside the truncation"
        ),
        checks=(policy_signs.NAME,),
        where="every token",
        variant="responses leaning one way above the truncation's reach",
    )


def _by_ids(ctx: Context) -> tuple[str, ...]:
    """Against: the lean is the echo of a logit processor on some token ids (each id's own
    shift carries a share of r's variance that other weights' shifts do not reach)."""
    share = ids_explain(ctx)
    if share is None:
        return ()
    return (
        f"a shift of its own for each token id carries {100 * share:.0f}% of r's variance: a "
        "logit processor on those ids leans the responses that hold them",
    )


def _some_requests(ctx: Context) -> tuple[str, ...]:
    """Against, and no share of its own (the ``sequences`` cause claims them): some requests hotter than the others of their step (the ``hot_sequences``
    check) where no part of the run is named (no code path's check fires): the responses that
    lean are those requests', as a setting or a path that only they take makes them. Other
    weights lean every response and make none hotter than its step's others: the corpus's
    policy runs (stale, partial, wrong or quantized weights) have 0-5 of 192 sequences hot, the
    check quiet; a temperature, top-p or penalty on a third of the requests makes 170-192 of
    672 hot (the check warns) and leans them as much."""
    e = hot_requests(ctx)
    if e is None:  # none hot, or a part's sequences are hot: the part is weighed
        return ()
    return (
        f"{e.hot} of {e.tested} sequences are hotter than the others of their step "
        f"({pct(e.hot_mass_share)} of the K3 mass): the responses that lean are some requests', "
        "as a setting or a path that only they take makes them, not every response's as other "
        "weights make them",
    )


FAR_APART = "another function at every token"


def far_apart(ctx: Context) -> Support | None:
    """Two full distributions far apart at every token with no transform's shape: the
    ``offset`` check alarms, its mean ``r`` is their KL divergence (``offset.kl_only``: the mean
    ratio is 1), and no truncation, shifted id or temperature's line shows (a faint line is the
    far-apart distributions' own: ``semantics.far_line``). Other weights do that whether or not
    the responses lean: on the Llama family (a 1024-token vocabulary) a pre-training
    checkpoint's responses spread 1.06x, p 0.26 (``f-pol-early``, mean ``r`` -0.883). None
    otherwise."""
    o = ctx.result(offset)
    e = evidence_of(o, offset.Evidence)
    semantic = [ctx.result(c) for c in (top_p, token_shift)]
    line = fired(ctx.result(temperature)) and not far_line(ctx)
    if not fired(o) or o is None or line or any(fired(c) for c in semantic):
        return None
    if not offset.kl_only(e):
        return None
    assert e is not None and e.log_ratio_mean is not None and e.ratio_mean is not None
    return Support(
        verdict=o.verdict,
        share=None,
        because=(
            f"mean r {e.log_ratio_mean:.3g} with a mean ratio E[exp r] of {e.ratio_mean:.4g}: "
            f"the two sides' KL divergence at every token ({-e.log_ratio_mean:.3g} nats), not a "
            "shift, with no transform's shape (no truncation, no id shifted, no line in the "
            "logprob beyond a faint one): two full distributions far apart, as other weights make"
        ),
        checks=(offset.NAME,),
        where="every token",
        variant=FAR_APART,
    )


def _names(*checks) -> tuple[str, ...]:
    return tuple(c.name for c in checks if c is not None)


def advice(ctx: Context, found: Support) -> str:
    if found.variant == "weights that changed at a step":
        return (
            f"the responses of {found.where} lean one way and those before do not: the weights "
            "the engine served changed there (a reload or weight sync that went wrong, CUDA "
            "graphs keeping stale pointers, a sleep/wake cycle): compare the engine's weights "
            f"with the trainer's at those steps; {POLICY_SIGNS_ADVICE}"
        )
    if found.variant == FAR_APART:
        return (
            "the two sides compute two different full distributions at every token, far apart "
            "(the mean r is their KL divergence), as when the trainer's weights are not the "
            "sampler's: compare the weight versions of both sides (another checkpoint, a weight "
            "sync that did not land, a reload), then the model each side builds from them (the "
            "rotary base and scaling, the norms' epsilon, a quantized copy of the weights); "
            "importance sampling would not fix either"
        )
    if found.variant == AT_STEPS:
        return (
            f"the responses of {found.where} are hotter than the other steps' at every position, "
            "as the gap between the trainer's weights and the sampler's makes them "
            "(stale weights after a large update, a weight sync or reload that went wrong at "
            "those steps, CUDA graphs keeping stale pointers after a sleep/wake); a code path "
            "those steps take (a replica, a kernel chosen by batch shape) would hit some "
            "positions more than others: compare the weight versions of both sides there first "
            "(a weight_version column in the dumps, or --tag weight_lag=N), then the engine "
            "that served them (`mismatchctl report RUN --steps A..B --by-gpu`); importance "
            "sampling would not fix either"
        )
    if found.variant == DRIFTING:
        return (
            "every token is over the baseline with no response leaning, as a precision loss "
            "would make it, but token ids move on their own and their shifts drift as the "
            "training goes, as the gap between the trainer's weights and weights a step or a "
            "sync behind does (a fixed loss of precision, a configuration or a template moves "
            "the same ids alike throughout): compare the weight versions of both sides first "
            "(a weight_version column in the dumps, or --tag weight_lag=N), then the engine's "
            "precision settings against the baseline's; for a lag by design, an off-policy "
            "correction (decoupled PPO) applies, never for a sync that did not land"
        )
    if found.variant == VARYING:
        return (
            "every step is over the baseline by an amount that changes from step to step, as "
            "the gap between the trainer's weights and the sampler's does (stale weights, a "
            "weight sync that did not land, another checkpoint), where a precision loss (an "
            "fp8 KV cache, fp8 weights) would raise every step alike; no response leans, so the "
            "numbers cannot rule the precision out: compare the weight versions of both sides "
            "first (a weight_version column in the dumps, or --tag weight_lag=N), then the "
            "engine's precision settings against the baseline's; importance sampling would not "
            "fix either"
        )
    return STALE_ADVICE if found.variant == "stale weights" else POLICY_SIGNS_ADVICE
