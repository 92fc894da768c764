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

    MASS_PER_K3: float = 4.0
    """... or, under those, a deficit at least this many times the mean K3 per token, its z at
    ``-levels.OFFSET_Z`` or beyond: mass removed beyond what the noise between two full
    distributions leaves out. Each token's ``r = (exp r - 1) - K3``, so the run's mean K3 is
    ``(rho - 1) - mean r``; two full distributions keep ``rho`` at 1 in expectation, and a
    sample of their noise lacks only the rare large positive ``r`` (144 healthy runs and
    improvements of thirteen corpora: a deficit at most 2.9 times their K3, z -2.7 at the
    lowest; every fault of another class 2.0 at most, z -2.3; the stop faults' fills raise the
    K3 instead, 0.15-0.8). A truncation removes ``b`` and adds about ``b^2 / 2``: every top-p,
    top-k, min-p and bad-words run of every corpus is 2.7-73 times (z -13 and beyond), under 4
    only the loud ones (top-p 0.6, 3.9-4.5), which the kept mass and the signs above name.
    Top-p 0.995 (1.03-1.06x a healthy run; its deficit 0.0046-0.0052, 63-65% of the tokens below
    zero) is 8-35 times, z -17 to -37: it was named on three of seven members by other signs
    and unseen on four (the sweeps of the Llama, the Gemma2, the Granite and the Phi)."""

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
    faint: bool = False
    """Warned by the mass removed beyond the noise alone (``MASS_PER_K3``), not the kept-mass
    signature: a faint truncation, or any mask that removes mass (a bad-words list)."""


def signature(ctx: Context) -> tuple[float | None, bool, bool]:
    """(mean ratio, warn-level signature, fail-level signature) of a renormalised rollout side
    (the temperature check asks too: a renormalisation also bends its line)."""
    o = offset_summary(ctx.state.offset)
    q = o["ratio_mean"]
    if q is None or o["ratio_z"] is None or o["negative_share"] is None:
        return q, False, False
    return q, _kept_mass(o, T.TOPP_DEFICIT_WARN) or removed(o), _kept_mass(o, T.TOPP_DEFICIT_FAIL)


def _kept_mass(o: dict[str, float | int | None], deficit: float) -> bool:
    """The kept-mass signature: the mean ratio's z at ``-OFFSET_Z``, nearly every token below
    zero (``TOPP_NEGATIVE_SHARE``) and a deficit of ``deficit`` or more."""
    q, z, neg = o["ratio_mean"], o["ratio_z"], o["negative_share"]
    if q is None or z is None or neg is None:
        return False
    return z <= -OFFSET_Z and neg >= T.TOPP_NEGATIVE_SHARE and 1.0 - q >= deficit


def removed(o: dict[str, float | int | None]) -> bool:
    """Mass removed beyond the noise (``MASS_PER_K3``): the deficit ``1 - rho`` at least that
    many times the mean K3 per token (``stats.offset``'s ``k3_mean``), its z at ``-OFFSET_Z``."""
    q, z, k3 = o["ratio_mean"], o["ratio_z"], o["k3_mean"]
    if q is None or z is None or k3 is None:
        return False
    return z <= -OFFSET_Z and k3 > 0 and 1.0 - q >= T.MASS_PER_K3 * k3


def run(ctx: Context) -> Check:
    if skipped := alignment.not_assessed(ctx, LAYER, NAME, TITLE):
        return skipped
    q, warn, fail = signature(ctx)
    o = offset_summary(ctx.state.offset)
    verdict = grade(fail, warn)
    faint = q is not None and verdict != "ok" and not _kept_mass(o, T.TOPP_DEFICIT_WARN)
    evidence = Evidence(
        ratio_mean=q,
        ratio_se=o["ratio_se"],
        ratio_z=o["ratio_z"],
        negative_share=o["negative_share"],
        faint=faint,
    )
    if q is None:
        return Check(LAYER, NAME, TITLE, NA, "too few sequences for a standard error", evidence)
    finding = (
        f"mean ratio rho = {fmt(q, 4)} (1 expected), rollout higher on "
        f"{pct(o['negative_share'])} of tokens"
    )
    if faint:
        k3 = o["k3_mean"] or 0.0
        finding += (
            f": {fmt((1.0 - q) / k3)}x the mean K3 per token ({fmt(k3)}) missing from the "
            f"mean ratio (z = {fmt(o['ratio_z'])}), mass removed on the rollout side beyond "
            "what noise between two full distributions leaves out: a faint truncation"
        )
    elif verdict != "ok":
        finding += f": the rollout side looks renormalised over a kept mass of about {fmt(q)}"
    advice = (
        "the engine renormalises over the top-p/top-k set and the trainer does not: compute the "
        "trainer logprobs under the same truncation, or sample with top_p = 1 and top_k = -1 "
        "(a smaller top-p means fewer low-probability tokens but a biased gradient)"
    )
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice_if(verdict, advice))
