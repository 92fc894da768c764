"""Are the two sides the same tokens? The lag +-1 correlations and K3 of the logprobs against
the lag-0 ones, and the turns shifted by a position on their own (``stats/misalign.py``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import (
    DATA,
    FAIL,
    NA,
    Check,
    CheckEvidence,
    absent,
    grade,
    renamed,
)
from mismatchctl.analysis.diagnose.checks import sentinels
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.samples import Sample, samples_of
from mismatchctl.analysis.diagnose.text import fmt, pct
from mismatchctl.engines.plan import Selection
from mismatchctl.stats import registry as M
from mismatchctl.stats.comoments import LAG_NAMES, correlation
from mismatchctl.stats.misalign import FACTOR as MISALIGN_FACTOR

NAME = "alignment"
LAYER = DATA
TITLE = "Alignment of the two sides (lag 0 vs lag +-1)"
ORDER = 10
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    ALIGN_MARGIN: float = 0.05
    """A lag +-1 correlation of the two sides above the lag-0 one by this much means one side is
    shifted by a position (FORMATS.md: "correlation at lag 0 should clearly beat lag +-1"). In
    simulation aligned sides correlate at 0.95 or more at lag 0 up to vllm_kl 0.1, against about
    0 at lag +-1, and a shifted side the other way round: the margin only absorbs ties."""

    ALIGN_PART_FAIL_SHARE: float = 1e-3
    """Turns shifted by a position on their own (``mismatchctl.stats.misalign``: a shifted
    pairing ten times closer than the stored one, where the stored one costs a K3 of 0.02 or
    more): any warns, holding this share of the tokens fails (as sentinels: a writer's error,
    not numerics)."""

    ALIGN_WARN_CORR: float = 0.8
    """A lag-0 correlation of the logprobs below this (with no better lag) means the two sides
    hardly describe the same tokens: published train/inference correlations are above 0.98.
    A shift is named only when the shifted pairing correlates at least this well too: a
    sentinel fill (SkyRL's -9999 where the other side holds a logprob) breaks every lag alike
    (the corpus' sentinel run: 0.001 at lag 0, 0.17 at lag -1, the level unrelated tokens of a
    response share), while a real shift matches one position off at 1.0."""

    ALIGN_WEAK_OVER_LAGS: float = 2.0
    """A weak lag-0 correlation is a warning only when it is under twice the best shifted one:
    sides of different tokens correlate no better at lag 0 than one position off (about 0.17 in
    the corpus), while a loud kernel fault on one gpu (5,000x a healthy run) lowers lag 0 to
    0.70 and leaves it four times the lags: aligned sides, a large mismatch, which the other
    layers name."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class MisalignedTurns(CheckEvidence):
    """Turns whose shifted pairing is much closer than the stored one (``stats/misalign.py``):
    of the turns tested, how many, their tokens and share of the tokens, which way they are
    shifted, and some of them."""

    turns_tested: int
    misaligned: int
    tokens: int = renamed(M.TOKENS.key)
    token_share: float = renamed(M.TOKEN_SHARE.key)
    one_position_later: int
    one_position_earlier: int
    samples: list[Sample]


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """The correlation of the two sides' logprobs and their vllm_kl paired as stored (lag 0),
    each rollout token with the trainer's next position (lag +1) and with its previous (lag
    -1); the pairs at lag 0; the turns shifted on their own (not written when the whole
    selection is shifted or too small to correlate)."""

    correlation_lag0: float | None
    correlation_lag_plus1: float | None
    correlation_lag_minus1: float | None
    pairs_lag0: int
    vllm_kl_lag0: float | None
    vllm_kl_lag_plus1: float | None
    vllm_kl_lag_minus1: float | None
    misaligned_turns: MisalignedTurns | None = absent()


def run(ctx: Context) -> Check:
    corr = {name: correlation(ctx.state.lags[i]) for i, name in enumerate(LAG_NAMES)}
    k3 = {
        name: (float(s / n) if n else None)
        for name, (n, s) in zip(LAG_NAMES, ctx.state.lag_k3, strict=True)
    }
    evidence = Evidence(
        correlation_lag0=corr["lag0"],
        correlation_lag_plus1=corr["lag_plus1"],
        correlation_lag_minus1=corr["lag_minus1"],
        pairs_lag0=int(ctx.state.lags[0][0]),
        vllm_kl_lag0=k3["lag0"],
        vllm_kl_lag_plus1=k3["lag_plus1"],
        vllm_kl_lag_minus1=k3["lag_minus1"],
    )
    shift_text = (
        f"; vllm_kl {fmt(k3['lag0'])} as stored, {fmt(k3['lag_plus1'])} pairing each rollout "
        f"token with the trainer's next position, {fmt(k3['lag_minus1'])} with its previous"
    )
    lag0 = corr["lag0"]
    if lag0 is None:
        return Check(LAYER, NAME, TITLE, NA, "too few tokens to correlate", evidence)
    shifted = {k: v for k, v in corr.items() if k != "lag0" and v is not None}
    best = max(shifted, key=shifted.__getitem__, default=None)
    if (
        best is not None
        and shifted[best] > lag0 + T.ALIGN_MARGIN
        and shifted[best] >= T.ALIGN_WARN_CORR
    ):
        where = "one position later" if best == "lag_plus1" else "one position earlier"
        return Check(
            LAYER, NAME, TITLE, "fail",
            f"the trainer logprobs match the rollout logprobs {where} (correlation "
            f"{fmt(shifted[best])} at {best} vs {fmt(lag0)} at lag 0): an off-by-one shift"
            + shift_text,
            evidence,
            "check how the trainer's logprobs are sliced against the response tokens (the "
            "logits at position t score token t+1); compare one sample by hand",
        )  # fmt: skip
    lags = max(shifted.values(), default=0.0)
    weak = lag0 < T.ALIGN_WARN_CORR and lag0 < T.ALIGN_WEAK_OVER_LAGS * lags
    finding = (
        f"lag-0 correlation {fmt(lag0)}; lag +1 {fmt(corr['lag_plus1'])}, "
        f"lag -1 {fmt(corr['lag_minus1'])}{shift_text}"
    )
    m = ctx.state.misaligned
    share = m.tokens / ctx.state.sentinels.tokens if ctx.state.sentinels.tokens else 0.0
    turns = MisalignedTurns(
        turns_tested=m.turns,
        misaligned=m.misaligned,
        tokens=m.tokens,
        token_share=share,
        one_position_later=m.later,
        one_position_earlier=m.earlier,
        samples=_turn_samples(ctx.report.selection, m.examples),
    )
    evidence = dataclasses.replace(evidence, misaligned_turns=turns)
    if m.misaligned:
        finding = (
            f"{m.misaligned} of {m.turns} turns tested ({pct(share)} of the tokens) match the "
            "rollout logprobs one position off (their shifted pairing at least "
            f"{MISALIGN_FACTOR:g}x closer than the stored one): an off-by-one shift in some "
            f"samples; {finding}"
        )
        advice = (
            "some samples are sliced one position off (one worker, one code path, the turns "
            "after a tool response): find what the listed samples share and compare one by hand"
        )
        verdict = grade(share >= T.ALIGN_PART_FAIL_SHARE, True)
        return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice)
    advice = "check that both columns hold logprobs of the same sampled tokens" if weak else None
    return Check(LAYER, NAME, TITLE, grade(False, weak), finding, evidence, advice)


def misaligned(ctx: Context) -> Check | None:
    """This check's result when it failed (for the checks that read it): the other numbers then
    mix up tokens."""
    found = ctx.result(NAME)
    return found if found is not None and found.verdict == FAIL else None


def not_assessed(ctx: Context, layer: str, name: str, title: str) -> Check | None:
    """The n/a result of a check that reads this one and ``sentinels``, when the sides are
    shifted or fill values sit where logprobs should be (a -9999 beside a logprob: every
    regression of one side on the other then measures the fill)."""
    if misaligned(ctx) is not None:
        why = "the sides are shifted against each other (see alignment)"
    elif (filled := ctx.result(sentinels)) is not None and filled.verdict == FAIL:
        why = "fill values sit where logprobs should be (see sentinels)"
    else:
        return None
    return Check(layer, name, title, NA, f"not assessed: {why}")


def _turn_samples(
    selection: Selection, examples: list[tuple[str, int, int, int, str]]
) -> list[Sample]:
    """Misaligned turns as ``samples_of`` lists them (the turn and the lag in ``what``)."""
    return samples_of(
        selection,
        [(run, step, seq, f"turn {turn}: {lag}") for run, step, seq, turn, lag in examples],
    )
