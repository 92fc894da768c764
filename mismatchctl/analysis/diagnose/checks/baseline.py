"""The selection against ``--baseline`` (a known-good run, a slice, or the same run's early
steps): its rate over the baseline's at its own token mix (``explain --baseline``;
docs/explain.md), and the shape of the excess."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import (
    FAIL,
    NA,
    OK,
    PATH,
    Check,
    CheckEvidence,
    absent,
    renamed,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context, baseline_on_other_gpus
from mismatchctl.analysis.diagnose.contrasts import ci_text, relative
from mismatchctl.analysis.diagnose.parts import FindingRow, finding_row
from mismatchctl.analysis.diagnose.text import fmt
from mismatchctl.engines import plan as K
from mismatchctl.stats import registry as M
from mismatchctl.stats.hot_sequences import sampled_nll, sampled_spread
from mismatchctl.stats.localize.result import (
    Explanation,
    Finding,
    finding_label,
    ratio_text,
    uniform_sentence,
)

NAME = "baseline"
LAYER = PATH
TITLE = "Against the baseline"
ORDER = 140
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    BASELINE_FACTOR: float = 1.5
    """The target's rate over the baseline's at the target's token mix (``explain
    --baseline``): 1.5x with the interval's low end above ``BASELINE_CI_LOW`` warns. Two healthy
    runs of one stack differ by their prompts and seeds: the sample data's two healthy captures
    differ by 1.1x, and different data mixes by up to 1.3x at the same token probabilities."""

    BASELINE_CI_LOW: float = 1.2
    """...the low end of the interval of that ratio (above the healthy differences just
    named)."""

    BASELINE_FAIL: float = 5.0
    """The interval's low end at 5x the baseline: fail (half a decade above a known-good run)."""

    IMPROVED_CI_HIGH: float = 1.0
    """The interval's high end below 1: the target is better than the baseline, reported as
    such."""

    LOCALIZED_EXCESS_SHARE: float = 0.5
    """With a baseline, an excess is *localized* when one finding carries at least half of it
    beyond the level of the rest of the run (``own_share``); otherwise it is spread (the
    signature of a policy mismatch or a precision loss when the dimensions are uniform)."""

    PLACE_DENSITY: float = 1.25
    """A finding is a place of the excess (``own_share``) only when its tokens carry this many
    times the excess per token of the rest of the run (the localization's own specificity
    gate, 1.25x); the whole run is none. A healthy run at temperature 0.6 over one at 0.9 (the
    GPT-NeoX member with a bf16 trainer) had its later turns found at 2.4x the baseline: 58% of
    the tokens carrying 58% of the excess, 1.03 times the first turns' per token, the uniform
    excess of a lower temperature, called localized (no exemption) and unexplained."""

    MIX_SHIFT: float = 0.25
    """The token-probability mix's own term of the difference over the baseline (``explain
    --baseline``'s decomposition along the bin), as a fraction of the baseline's level, beyond
    which the two runs sample other distributions. A precision loss computes the same
    distribution less exactly and moves the mix little (the runs named precision in every
    corpus: -1% to 7%, 14% beside one gpu's off-by-one merge, which samples its own tokens); a
    run sampled at temperature 0.6 over a baseline at 0.9 moves it by -58% on the 3-layer model,
    -48% on the 8-layer one, -30% on the Llama-architecture family (docs/diagnose.md "Another
    family")."""

    TEMPERATURE_MIX: float = 0.17
    """A run samples more likely tokens than the baseline, as a lower sampling temperature makes
    it, when its mix term is below ``-TEMPERATURE_MIX`` (``TEMPERATURE_K3``). Healthy runs at
    0.6 over healthy runs at 0.9, 25 diagnoses of ten model draws (every member of the family
    and its MoE, with fp32 and bf16 trainers, the long responses): -0.24 (the GPT-2 member with
    a bf16 trainer) to -0.36. The uniform excesses under ``TEMPERATURE_K3`` of every fault of
    the corpora: -0.11 at the lowest (a subtle top-p, which its own checks name), none of a
    precision or a policy below -0.10. It sat at ``MIX_SHIFT`` (0.25) until the GPT-2's -0.243
    warned; ``MIX_SHIFT`` stays the advice's measure of two distributions apart, both ways."""

    TEMPERATURE_NLL: float = 0.25
    """...or when its sampled tokens' mean negative logprob (the rollout side's, over the tokens
    with finite logprobs: ``stats.hot_sequences.sampled_nll``) is this fraction below the
    baseline's: a lower temperature samples likelier tokens, whatever the model's probabilities
    look like. Healthy runs at 0.6 over runs at 0.9, 31 diagnoses of every family draw, its MoEs
    and long responses, fp32 and bf16 trainers: -33% to -46%; -33% is the Cohere member, whose
    flat distributions (a mean probability of 0.11 at 0.9) move its probability-bin mix by only
    -9%, so that the mix alone left it warning a precision loss at 1.8x. A policy or precision
    fault moves it within 3%; of the uniform excesses under ``TEMPERATURE_K3`` of every corpus,
    the lowest are truncations (a subtle top-p -16%, a min-p -15%), which their own checks
    name."""

    TEMPERATURE_SPREAD: float = 0.2
    """...or when its sampled tokens' rollout logprobs spread this fraction wider than the
    baseline's (their standard deviation: ``stats.hot_sequences.sampled_spread``) and the excess
    is within the square of that widening (``SPREAD_SLACK``). A model whose context hardly
    moves its logits (a barely trained one) samples near-uniformly at any temperature, so its
    mean -logprob barely moves, but a lower T divides every logit difference by T: the
    logprobs spread as 1/T and the logit noise's K3 grows as 1/T^2 alike (``family.py
    --pretrain 3``, loss 6.4 of ln 1024 = 6.9: a healthy run at 0.6 over one at 0.9 spread
    1.68x, its mean -logprob -1.8%, 2.5x uniform, which warned a precision loss). A trained
    model at a lower temperature samples its likelier tokens and its spread narrows (-1% to
    -30% over the healthy pairs at 0.6 over 0.9 of every trained draw, 39 diagnoses): the mean
    -logprob tells it there. Of the uniform excesses under ``TEMPERATURE_K3`` over a baseline
    in every corpus (90 diagnoses), the widest spread 5.1% wider (a subtle raw-logprobs fault,
    which its own checks name), no precision or policy 2.4% (docs/diagnose.md "A barely
    trained model")."""

    SPREAD_SLACK: float = 1.25
    """The excess a widening ``w`` of the logprobs' spread accounts for: up to ``w^2`` times
    this (the rounding of the logits is not exactly the same at both temperatures)."""

    TEMPERATURE_K3: float = 2.8
    """A uniform excess up to this many times the baseline, in a run that samples more likely
    tokens than the baseline (its mix term below ``-TEMPERATURE_MIX``), is what a lower sampling
    temperature makes of healthy numerics: both sides divide the logits by T, so the logit noise
    in ``r`` grows as 1/T and K3 as 1/T^2 on every token alike, (1/0.6)^2 = 2.8 between the
    common temperatures 0.6 and 1.0. Measured: healthy runs at 0.6 over healthy runs at 0.9
    2.1x (3- and 8-layer models) and 2.2x (the Llama family, mix -30%). No dump says the
    temperature, so the check says the runs are not like for like instead of warning. Of every
    fault of every corpus over its baseline, none sits there: those whose mix moves by more than
    a quarter are 30x their baseline or more (the semantics, a wrong checkpoint).
    The excess is held to it (and to the spread's square) by its interval's low end, not its
    point: one step of the Qwen2 member's healthy run at 0.6 over its healthy run at 0.9 with a
    bf16 trainer (32 responses a side) stood 2.84x (95% CI 2.4-3.4), its mix -30% and its mean
    -logprob -41%, and warned a precision loss (its whole run: 2.2x). Of the stored faults over
    their baselines in every corpus with a uniform excess past 2.8x whose interval reaches under
    it (seven), none shows a sign of a lower temperature."""

    UNIFORM_DIMS_MIN: int = 2
    """A spread excess is called uniform when at least this many dimensions explain nothing
    (turn, probability bin, step, gpu...): stale or wrong weights change every token's
    distribution, not one code path's."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Decomposition(CheckEvidence):
    """How much of the excess a dimension's token mix, its rates and their interaction make
    (``explain --baseline``)."""

    dim: str
    mix: float
    rate: float
    interaction: float


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """The selection against the baseline (``explain --baseline``): both levels, the rate ratio
    at the selection's token mix with its interval, the findings, the dimensions that explain
    nothing (``uniform``), the decomposition, the notes; written in some cases only:
    ``improved`` (the interval below 1), ``mix_shift``, ``nll_shift`` (the run's sampled
    tokens' mean -logprob over the baseline's, less 1: ``TEMPERATURE_NLL``) and
    ``spread_shift`` (their logprobs' standard deviation over the baseline's, less 1:
    ``TEMPERATURE_SPREAD``), ``excess_shape``
    (``excess_shape``: localized,
    concentrated, uniform or mixed) and ``concentrated_in`` (the dimension whose small values
    hold the excess)."""

    baseline: str
    vllm_kl: float | None = renamed(M.VLLM_KL.key)
    baseline_vllm_kl: float | None
    rate_ratio: float | None
    rate_ratio_ci: tuple[float, float] | None
    findings: list[FindingRow]
    uniform: list[str]
    decomposition: list[Decomposition]
    notes: list[str]
    improved: bool | None = absent()
    mix_shift: float | None = absent()
    nll_shift: float | None = absent()
    spread_shift: float | None = absent()
    excess_shape: str | None = absent()
    concentrated_in: str | None = absent()


def run(ctx: Context) -> Check:
    """The selection's mismatch against ``--baseline`` at its own token mix."""
    view = ctx.baseline
    if view is None:
        return Check(
            LAYER, NAME, TITLE, NA, "no baseline given", None,
            "give a known-good run (or the same run's early steps) with --baseline REF: every "
            "excess is then judged against it",
        )  # fmt: skip
    e = view.explanation
    ratio, ci = e.rate_ratio, e.rate_ratio_ci
    evidence = Evidence(
        baseline=view.label,
        vllm_kl=e.vllm_kl,
        baseline_vllm_kl=e.baseline_vllm_kl,
        rate_ratio=ratio,
        rate_ratio_ci=ci,
        findings=[finding_row(e, f) for f in e.findings],
        uniform=[u.dim for u in e.uniform if u.uniform],
        decomposition=[
            Decomposition(dim=d.dim, mix=d.mix, rate=d.rate, interaction=d.interaction)
            for d in e.decomposition
        ],
        notes=e.notes,
    )
    head = (
        f"vllm_kl {fmt(e.vllm_kl)} vs {fmt(e.baseline_vllm_kl)} on {view.label}: "
        f"{ratio_text(ratio)}x its rate at the same token mix ({ci_text(ci)})"
    )
    if e.baseline_vllm_kl == 0 and e.vllm_kl > 0:
        return _over_exact(view.label, e, evidence)
    if ratio is None or ci is None:
        return Check(LAYER, NAME, TITLE, NA, head + "; no rate ratio", evidence)
    if ci[1] < T.IMPROVED_CI_HIGH:
        improved = dataclasses.replace(evidence, improved=True)
        return Check(LAYER, NAME, TITLE, OK, head + ": an improvement", improved)
    verdict = relative(ratio, ci, T.BASELINE_FACTOR, T.BASELINE_CI_LOW, T.BASELINE_FAIL, e.vllm_kl)
    if verdict == OK:
        return Check(LAYER, NAME, TITLE, OK, head + ": no excess to speak of", evidence)
    shape = excess_shape(e)
    shift = mix_shift(e)
    nll, spread = nll_shift(ctx), spread_shift(ctx)
    evidence = dataclasses.replace(
        evidence, excess_shape=shape, mix_shift=shift, nll_shift=nll, spread_shift=spread
    )
    if another_temperature(shape, shift, ratio, nll, spread, ci):
        return Check(
            LAYER, NAME, TITLE, OK,
            f"{head}, spread uniformly; but the run samples at a sharper distribution than the "
            f"baseline ({_likelier(shift, nll, spread, ci[0])}), as a lower sampling "
            "temperature does, under which every token's K3 grows as 1/T^2 (both sides divide "
            f"the logits by T; up to {T.TEMPERATURE_K3:g}x between 0.6 and 1.0): no excess "
            "beyond another temperature's",
            evidence,
            "compare with a baseline sampled at the run's temperature",
        )  # fmt: skip
    explain = f"`mismatchctl explain {ctx.label} --baseline {view.label}`"
    advice = {
        "localized": f"the excess is localized: see the localized finding and {explain}",
        "concentrated": "the excess sits in a few tokens (see the low-probability check, "
        f"`mismatchctl tokens {ctx.label}` and {explain}), not in the policy",
    }.get(
        shape,
        "the excess is spread over every part of the run: compare the weights the engine "
        "sampled with against the trainer's (see the cause check)",
    )
    other = baseline_on_other_gpus(ctx) if shape == "uniform" else None
    if other is not None:
        advice = (
            f"the excess is spread over every part of the run, which ran on {', '.join(other[0])} "
            f"while the baseline ran on {', '.join(other[1])}: another gpu generation's kernels "
            "or the policy (see the cause check)"
        )
    where = ""
    if e.findings and shape == "localized":
        top = max(e.findings, key=lambda f: own_share(f, e.rate_ratio))
        where = f"; most of it in {finding_label(top)}"
    elif shape == "uniform":
        names = ", ".join(u.dim for u in e.uniform if u.uniform)
        where = f"; spread uniformly ({names} explain nothing)"
    elif shape == "concentrated":
        u = next(u for u in e.uniform if u.excess_elsewhere and u.dim == K.BIN)
        evidence = dataclasses.replace(evidence, concentrated_in=u.dim)
        where = f"; not a uniform excess: {uniform_sentence(u, e.mode)}"
    return Check(LAYER, NAME, TITLE, verdict, head + where, evidence, advice)


def _over_exact(label: str, e: Explanation, evidence: Evidence) -> Check:
    """Over a bit-exact baseline (its two sides agree on every token): every token here that
    differs is excess, on every part of the run alike unless the run's own checks find a part
    hotter than the rest; no ratio exists, and the level is judged against that stack."""
    shaped = dataclasses.replace(evidence, excess_shape="uniform")
    return Check(
        LAYER, NAME, TITLE, FAIL,
        f"vllm_kl {fmt(e.vllm_kl)} vs exactly 0 on {label}: the baseline's two sides agree on "
        "every token (a bit-exact stack), so all of this run's mismatch is excess over it",
        shaped,
        "a bit-exact baseline counts any numeric difference as excess: the run's stack "
        "computes otherwise than the baseline's (kernels, precision or batch-variant "
        "reductions); to judge this stack's own level, give a baseline of the same stack",
    )  # fmt: skip


def another_temperature(
    shape: str | None,
    shift: float | None,
    ratio: float | None,
    nll: float | None = None,
    spread: float | None = None,
    ci: tuple[float, float] | None = None,
) -> bool:
    """A uniform excess up to ``TEMPERATURE_K3`` in a run whose token mix moves the level below
    ``-TEMPERATURE_MIX``, or whose sampled tokens' mean -logprob is ``TEMPERATURE_NLL`` below
    the baseline's, or whose logprobs spread ``TEMPERATURE_SPREAD`` wider than the baseline's
    with the excess within the square of that widening: what a lower sampling temperature than
    the baseline's makes. With its interval ``ci``, the excess is within a bound when the
    interval's low end is (``TEMPERATURE_K3``)."""
    bound = ci[0] if ci is not None else ratio
    if shape != "uniform" or bound is None or bound > T.TEMPERATURE_K3:
        return False
    return _by_mix(shift) or _by_nll(nll) or _by_spread(spread, bound)


def _by_mix(shift: float | None) -> bool:
    return shift is not None and shift < -T.TEMPERATURE_MIX


def _by_nll(nll: float | None) -> bool:
    return nll is not None and nll < -T.TEMPERATURE_NLL


def _by_spread(spread: float | None, ratio: float | None) -> bool:
    return (
        spread is not None
        and ratio is not None
        and spread > T.TEMPERATURE_SPREAD
        and ratio <= (1 + spread) ** 2 * T.SPREAD_SLACK
    )


def _likelier(
    shift: float | None, nll: float | None, spread: float | None, ratio: float | None
) -> str:
    said = []
    if _by_mix(shift):
        said.append(f"their mix alone moves its level {shift:+.0%}")
    if _by_nll(nll):
        said.append(f"its sampled tokens' mean -logprob {nll:+.0%} the baseline's")
    if spread is not None and _by_spread(spread, ratio):
        said.append(
            f"its sampled tokens' logprobs spread {1 + spread:.2f}x as wide as the baseline's, "
            f"as every logit divided by a T {1 + spread:.2f}x lower spreads them, its K3 "
            f"{(1 + spread) ** 2:.2f}x"
        )
    return "; ".join(said)


def nll_shift(ctx: Context) -> float | None:
    """The run's sampled tokens' mean -logprob over the baseline's, less 1
    (``TEMPERATURE_NLL``); None without the baseline's per-sequence sums."""
    return _over_baseline(ctx, sampled_nll)


def spread_shift(ctx: Context) -> float | None:
    """The standard deviation of the run's sampled tokens' rollout logprobs over the
    baseline's, less 1 (``TEMPERATURE_SPREAD``); None without the baseline's per-sequence
    sums."""
    return _over_baseline(ctx, sampled_spread)


def _over_baseline(ctx: Context, measure: Callable[..., float | None]) -> float | None:
    """``measure`` of the run's per-sequence sums over the baseline's, less 1; None without the
    baseline's sums or either measure."""
    view = ctx.baseline
    if view is None or view.sequences is None:
        return None
    run = measure(*ctx.state.hot_sequences.runs().values())
    base = measure(view.sequences)
    return run / base - 1 if run is not None and base else None


def mix_shift(e: Explanation | Evidence) -> float | None:
    """The token-probability mix's term of the difference over the baseline, as a fraction of
    the baseline's level (``MIX_SHIFT``); None without the decomposition along the bin."""
    row = next((d for d in e.decomposition if d.dim == K.BIN), None)
    if row is None or not e.baseline_vllm_kl:
        return None
    return row.mix / e.baseline_vllm_kl


def excess_shape(e: Explanation) -> str:
    """``localized`` when one finding carries ``LOCALIZED_EXCESS_SHARE`` of the excess as a place
    (``own_share``); ``concentrated`` when the probability bins with enough tokens to test hold
    too little of it (``uniform_excess_share`` of stats/localize_thresholds.py: the excess sits
    in the rare tokens' bins, too small to test one by one); ``uniform`` when at least
    ``UNIFORM_DIMS_MIN`` dimensions explain nothing; else ``mixed``.

    Only the bins: the values of a dimension of whole responses (a step, a gpu, a length) that
    are too imprecise to test are so by a few heavy responses, which is no place of the excess.
    A healthy mixture of experts at temperature 0.6, scored by a bf16 trainer, over one at 0.9
    (``m-h-t06`` of ``family.py --moe --seed 1 --trainer bf16``: 2.2x, the temperature's own)
    had one step imprecise by its heavy responses and holding 53% of the excess: it was called
    concentrated, which is neither uniform (the temperature's exemption) nor the rare tokens
    the precision's advice then named (``precision.SHAPES``)."""
    top = max((own_share(f, e.rate_ratio) for f in e.findings), default=0.0)
    if top >= T.LOCALIZED_EXCESS_SHARE:
        return "localized"
    if any(u.excess_elsewhere and u.dim == K.BIN for u in e.uniform):
        return "concentrated"
    if sum(u.uniform for u in e.uniform) >= T.UNIFORM_DIMS_MIN:
        return "uniform"
    return "mixed"


def own_share(f: Finding, ratio: float | None) -> float:
    """The share of the excess a finding holds as a place (``LOCALIZED_EXCESS_SHARE``): its
    share of the excess, less, when the rest of the run is itself ``BASELINE_FAIL`` times the
    baseline or more (``ratio``: the run's), what its tokens would carry at the rest's excess
    per token. A part of most of the tokens a little hotter than a rest that fails the baseline
    by itself is that level's, not a place: an fp8 KV cache on responses of 680 tokens over a
    bf16 baseline, KV 128 and up (89% of the tokens) 22x the baseline beside the rest's 12x,
    carries 94% of the excess but 45% beyond the rest's level (docs/diagnose.md "Long
    responses"). Under that level the rest is no cause of every token of its own (a rotary
    base 2x off, ``un-rope-theta-subtle``: the rest 2.1x)."""
    share, tokens = f.excess_share, f.token_share
    if share is None or not math.isfinite(share) or tokens >= 1.0:
        return 0.0
    if share < 1.0 and (share / tokens) / ((1.0 - share) / (1.0 - tokens)) < T.PLACE_DENSITY:
        return 0.0
    if ratio is None or not ratio > 1.0:
        return share
    rest = 1.0 + (1.0 - share) * (ratio - 1.0) / (1.0 - tokens)
    if rest < T.BASELINE_FAIL:
        return share
    return share - tokens * (1.0 - share) / (1.0 - tokens)
