"""A systematic offset between the sides: the mean log ratio far from 0, with most tokens on its
side (processed against raw logprobs, a temperature or penalty on one side)."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.advice import PROCESSED_HINT
from mismatchctl.analysis.diagnose.check import (
    NA,
    SEMANTIC,
    Check,
    CheckEvidence,
    advice_if,
    grade,
    renamed,
)
from mismatchctl.analysis.diagnose.checks import alignment, sentinels
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.levels import OFFSET_Z
from mismatchctl.analysis.diagnose.text import fmt, pct
from mismatchctl.stats import registry as M
from mismatchctl.stats.offset import offset_summary

KL_ADVICE = (
    "no transform of the logprobs makes this: the two sides compute two different full "
    "distributions at every token, as other weights or another model build do: compare the "
    "weights and the model each side loads (see the cause check)"
)

NAME = "offset"
LAYER = SEMANTIC
TITLE = "Systematic offset between the sides"
ORDER = 70
READS: tuple[CheckModule, ...] = (alignment, sentinels)


@dataclass(frozen=True)
class Thresholds:
    """A systematic offset: the mean's z at ``levels.OFFSET_Z`` or beyond, and ..."""

    OFFSET_SIGN_SHARE: float = 0.65
    """Share of tokens whose r has the sign of the mean. Symmetric noise gives ~0.5 (0.53 with
    logit noise of 0.3); a temperature on one side gives 0.74-0.83 and a top-p renormalisation
    ~1.0 (simulated softmax over a 64-token vocabulary)."""

    OFFSET_WARN: float = 0.005
    """|mean r| in nats from which a systematic offset warns: half the low end of the healthy
    mean |delta logprob| (0.006-0.011, BACKGROUND.md)."""

    SHIFT_BEYOND_KL: float = 0.2
    """The mean ``r`` is a shift only when the mean ratio ``E[exp r]`` departs from 1 by at least
    this share of it. Two full distributions, however far apart, give ``E[exp r] = 1`` under the
    engine's sampling, so their mean ``r`` is minus their KL divergence (``mean r = (rho - 1) -
    mean K3``): a mean of that size is the distance of another function, not a shift. A shift
    ``c`` of the logprobs gives ``rho - 1 = e^c - 1``, about ``c``, and a truncation its dropped
    mass, about the whole mean: the semantic faults whose only sign is this check keep 0.33-0.98
    of their mean in ``rho - 1`` (``combo-topp-stale*`` 0.33-0.41, ``sem-badwords-loud``
    0.64-0.67, ``f-combo-stale-topp`` 0.58, ``f-sem-topp-subtle`` 0.98); a pre-training
    checkpoint served on the Llama family (``f-pol-early``, mean ``r`` -0.883, ``rho`` 1.004)
    keeps 0.005 and was named a shift before (docs/diagnose.md "Another family"). The verdict
    stands (the mean is off); the finding and the advice say which it is."""

    OFFSET_FAIL: float = 0.02
    """|mean r| from which a systematic offset fails: twice the high end of the healthy mean
    |delta logprob|, below the 0.05 seen in failing runs."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """The mean log ratio r with its sequence-clustered standard error and z, and the share of
    tokens with r < 0 (``stats/offset.py``)."""

    log_ratio_mean: float | None = renamed(M.LOG_RATIO_MEAN.key)
    log_ratio_se: float | None
    log_ratio_z: float | None
    negative_share: float | None
    ratio_mean: float | None = None


def kl_only(e: Evidence | None) -> bool:
    """Whether the mean ``r`` is the two sides' KL divergence, not a shift
    (``SHIFT_BEYOND_KL``)."""
    if e is None or e.log_ratio_mean is None or e.ratio_mean is None or e.log_ratio_mean == 0:
        return False
    return abs(e.ratio_mean - 1.0) < T.SHIFT_BEYOND_KL * abs(e.log_ratio_mean)


def run(ctx: Context) -> Check:
    if skipped := alignment.not_assessed(ctx, LAYER, NAME, TITLE):
        return skipped
    o = offset_summary(ctx.state.offset)
    m, z, neg = o[M.LOG_RATIO_MEAN], o["log_ratio_z"], o["negative_share"]
    evidence = Evidence(
        log_ratio_mean=m, log_ratio_se=o["log_ratio_se"], log_ratio_z=z, negative_share=neg,
        ratio_mean=o["ratio_mean"],
    )  # fmt: skip
    if m is None or z is None or neg is None:
        return Check(LAYER, NAME, TITLE, NA, "too few sequences for a standard error", evidence)
    same_sign = neg if m < 0 else 1 - neg
    systematic = abs(z) >= OFFSET_Z and same_sign >= T.OFFSET_SIGN_SHARE
    verdict = grade(systematic and abs(m) >= T.OFFSET_FAIL, systematic and abs(m) >= T.OFFSET_WARN)
    side = "rollout" if m < 0 else "trainer"
    finding = (
        f"mean log ratio r = {fmt(m)} (z = {fmt(z)}, sequence-clustered); {pct(same_sign)} of "
        f"tokens have r of that sign"
    )
    advice = advice_if(verdict, PROCESSED_HINT)
    if verdict != "ok" and kl_only(evidence):
        finding += (
            f"; the mean ratio E[exp r] is {o['ratio_mean']:.4g}: the mean is the two sides' KL "
            "divergence, not a shift (two full distributions far apart)"
        )
        advice = KL_ADVICE
    elif verdict != "ok":
        finding += f": the {side} side is systematically higher"
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice)
