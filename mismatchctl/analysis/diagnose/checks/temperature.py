"""A temperature applied on one side only: the trainer's logprobs a line in the rollout's with a
slope away from 1 that explains part of r's variance."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.advice import PROCESSED_HINT
from mismatchctl.analysis.diagnose.check import (
    NA,
    SEMANTIC,
    Check,
    CheckEvidence,
    advice_if,
    evidence_of,
    fired,
    grade,
)
from mismatchctl.analysis.diagnose.checks import alignment, offset, sentinels, top_p
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.text import fmt, pct
from mismatchctl.stats.comoments import regression

NAME = "temperature"
LAYER = SEMANTIC
TITLE = "Temperature applied on one side only"
ORDER = 80
READS: tuple[CheckModule, ...] = (alignment, sentinels, offset)


@dataclass(frozen=True)
class Thresholds:
    TEMP_R2_WARN: float = 0.05
    TEMP_R2_FAIL: float = 0.2
    """Share of the variance of r explained by a line in the rollout logprob. The calibration
    corpus' 34 healthy and improved runs (a real model's bf16 engine against its fp32 trainer,
    temperatures 0.6-1.0 on both sides) stay under 0.0016; a temperature on one side gives
    0.25 (0.9 against 0.95) to 0.55 (against none), raw logprobs 0.25-0.37, a repetition
    penalty in the engine's logprobs 0.14-0.23. Another policy gives at most 0.026 (a wrong
    checkpoint): the warning sits at twice that, thirty times the healthy maximum."""

    TEMP_SLOPE_WARN: float = 0.003
    TEMP_SLOPE_FAIL: float = 0.03
    """|slope - 1| of trainer on rollout logprobs. Healthy runs stay under 0.0005; the subtle
    temperature and raw-logprob faults of the corpus give 0.006-0.009, the loud ones 0.06-0.13
    (the least squares slope is pulled towards 1 because the log-partition term varies between
    contexts, so it understates the temperature's distance to 1). Both gates must hold."""

    FAR_LINE_SHARE: float = 0.15
    """Beside an ``offset`` that is the KL of two distributions far apart (``offset.kl_only``), a
    line explaining less than this share of ``r``'s variance is that other function's, not a
    temperature's: the verdict stands (the line is there), the finding and the advice say so. A
    temperature (or raw logprobs) moves ``r`` along its line up to each context's
    log-partition: 25-55% of ``r``'s variance (``f-sem-temp-loud`` of the Llama family 52-54%
    with a mean that is the KL too; ``sem-rep-loud`` 23%). A checkpoint from pre-training,
    flatter than the trained one, draws a faint line: 7.6% on the family with an 8192-token
    vocabulary (``f-pol-early``, slope 1.22, mean ``r`` -1.28, mean ratio 0.977), above
    ``TEMP_R2_WARN``, where the byte models' other weights stayed under 2.6%. Of every corpus's
    runs with both signs, no other has a line under 0.25 (docs/diagnose.md "Another family")."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """The least-squares line of the trainer's logprobs on the rollout's (``slope``,
    ``intercept``), the share of r's variance it explains (``diff_r2``), and the temperature
    the slope implies."""

    slope: float | None
    intercept: float | None
    diff_r2: float | None
    implied_temperature: float | None


def run(ctx: Context) -> Check:
    if skipped := alignment.not_assessed(ctx, LAYER, NAME, TITLE):
        return skipped
    reg = regression(ctx.state.lags[0])
    slope, r2 = reg["slope"], reg["diff_r2"]
    evidence = Evidence(
        slope=slope, intercept=reg["intercept"], diff_r2=r2, implied_temperature=slope
    )
    if slope is None or r2 is None or slope <= 0:
        return Check(
            LAYER, NAME, TITLE, NA,
            f"no positive relation between the sides (slope {fmt(slope)})", evidence,
        )  # fmt: skip
    dev = abs(slope - 1.0)
    fail = dev >= T.TEMP_SLOPE_FAIL and r2 >= T.TEMP_R2_FAIL
    warn = dev >= T.TEMP_SLOPE_WARN and r2 >= T.TEMP_R2_WARN
    finding = (
        f"trainer ~ {fmt(slope)} x rollout logprob + c; the line explains {pct(r2)} of r's variance"
    )
    if fail or warn:
        sharper = "rollout" if slope < 1 else "trainer"
        finding += (
            f": the {sharper} side is sharper, as if its logits were divided by a temperature "
            f"of about {fmt(min(slope, 1 / slope))} that the other side lacks (least squares "
            "understates the gap)"
        )
    if fail and top_p.signature(ctx)[2]:
        fail, warn = False, True  # a top-p renormalisation also bends the line: see that check
        finding += "; the top-p signature is present too, fix that first"
    verdict = grade(fail, warn)
    advice = advice_if(verdict, PROCESSED_HINT)
    if (fail or warn) and far_line(ctx, r2):
        finding += (
            f"; beside a mean r that is the KL of two far-apart distributions (the offset "
            f"check), a line under {T.FAR_LINE_SHARE:.0%} of r's variance is theirs, not a "
            "temperature's"
        )
        advice = offset.KL_ADVICE
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice)


def far_line(ctx: Context, r2: float | None) -> bool:
    """Whether a line explaining ``r2`` of r's variance is the faint line of two far-apart
    distributions (``FAR_LINE_SHARE``): the ``offset`` check alarms with a mean that is their
    KL."""
    o = ctx.result(offset)
    e = evidence_of(o, offset.Evidence)
    return fired(o) and offset.kl_only(e) and r2 is not None and r2 < T.FAR_LINE_SHARE
