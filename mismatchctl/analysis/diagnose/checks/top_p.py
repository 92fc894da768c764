"""Top-p / top-k renormalised on the rollout side: the mean probability ratio below 1 (the kept
mass), with the rollout side higher on nearly every token."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import NA, SEMANTIC, Check, CheckEvidence, advice_if, grade
from mismatchctl.analysis.diagnose.checks import alignment, sentinels
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.levels import OFFSET_Z
from mismatchctl.analysis.diagnose.text import fmt, pct
from mismatchctl.stats.offset import offset_summary

NAME = "top_p"
LAYER = SEMANTIC
TITLE = "Top-p / top-k renormalised on one side"
ORDER = 90
READS: tuple[CheckModule, ...] = (alignment, sentinels)


@dataclass(frozen=True)
class Thresholds:
    """The top-p signature: the mean ratio's z at ``-levels.OFFSET_Z`` or beyond, and ..."""

    TOPP_DEFICIT_WARN: float = 0.005
    TOPP_DEFICIT_FAIL: float = 0.02
    """1 - mean(rho): for proper distributions over the same vocabulary the mean ratio is exactly
    1 in expectation (sum of p_train over the sampled support), whatever the noise; a
    top-p/top-k renormalisation on the rollout side makes it the kept mass (0.896 at top_p =
    0.8, BACKGROUND.md; 0.965 at top_p = 0.95 in simulation)."""

    TOPP_NEGATIVE_SHARE: float = 0.9
    """Share of tokens with r < 0 (rollout higher) that goes with a renormalised rollout side:
    every kept token's probability is divided by the kept mass (~1.0 in simulation, 0.5 for
    noise)."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """The mean probability ratio rho with its sequence-clustered standard error and z, and the
    share of tokens with r < 0 (``stats/offset.py``)."""

    ratio_mean: float | None
    ratio_se: float | None
    ratio_z: float | None
    negative_share: float | None


def signature(ctx: Context) -> tuple[float | None, bool, bool]:
    """(mean ratio, warn-level signature, fail-level signature) of a renormalised rollout side
    (the temperature check asks too: a renormalisation also bends its line)."""
    o = offset_summary(ctx.state.offset)
    q, z, neg = o["ratio_mean"], o["ratio_z"], o["negative_share"]
    if q is None or z is None or neg is None:
        return q, False, False
    base = z <= -OFFSET_Z and neg >= T.TOPP_NEGATIVE_SHARE
    deficit = 1.0 - q
    return q, base and deficit >= T.TOPP_DEFICIT_WARN, base and deficit >= T.TOPP_DEFICIT_FAIL


def run(ctx: Context) -> Check:
    if skipped := alignment.not_assessed(ctx, LAYER, NAME, TITLE):
        return skipped
    q, warn, fail = signature(ctx)
    o = offset_summary(ctx.state.offset)
    evidence = Evidence(
        ratio_mean=q,
        ratio_se=o["ratio_se"],
        ratio_z=o["ratio_z"],
        negative_share=o["negative_share"],
    )
    if q is None:
        return Check(LAYER, NAME, TITLE, NA, "too few sequences for a standard error", evidence)
    verdict = grade(fail, warn)
    finding = (
        f"mean ratio rho = {fmt(q, 4)} (1 expected), rollout higher on "
        f"{pct(o['negative_share'])} of tokens"
    )
    if verdict != "ok":
        finding += f": the rollout side looks renormalised over a kept mass of about {fmt(q)}"
    advice = (
        "the engine renormalises over the top-p/top-k set and the trainer does not: compute the "
        "trainer logprobs under the same truncation, or sample with top_p = 1 and top_k = -1 "
        "(a smaller top-p means fewer low-probability tokens but a biased gradient)"
    )
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice_if(verdict, advice))
