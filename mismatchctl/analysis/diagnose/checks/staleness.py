"""Rollouts made with older weights: the vllm_kl of rollouts at a weight lag of 1 or more over
that of current ones (a weight version column joined from the store's sequence rows), or runs
tagged with a weight lag (``weight_lags.py``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mismatchctl.analysis.diagnose.advice import STALE_ADVICE
from mismatchctl.analysis.diagnose.check import (
    FAIL,
    NA,
    OK,
    TRAJECTORY,
    WARN,
    Check,
    CheckEvidence,
    advice_if,
    flat,
    renamed,
    worst,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.contrasts import ci_text, relative
from mismatchctl.analysis.diagnose.extra import LagSums
from mismatchctl.analysis.diagnose.levels import LEVEL, MEDIUM_MAX
from mismatchctl.analysis.diagnose.text import fmt
from mismatchctl.analysis.diagnose.weight_lags import tagged_lags
from mismatchctl.engines import plan as K
from mismatchctl.stats import registry as M
from mismatchctl.stats.localize.math import norm_ppf, relvar, sandwich_var
from mismatchctl.stats.localize.result import ratio_text

NAME = "staleness"
LAYER = TRAJECTORY
TITLE = "Rollouts made with older weights"
ORDER = 260
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    STALE_FACTOR: float = 1.5
    """vllm_kl of rollouts made with older weights (lag >= 1) over that of current ones: 1.5x
    warns when the interval's low end reaches ``STALE_CI_LOW``; an interval above
    ``STALE_FAIL`` fails. The two are rollouts of one run told apart by the weights' version
    alone, a target and its baseline (``BASELINE_FACTOR``'s 1.5x and 1.2x, not the 2x of a part
    of a run found by a search over thousands of cells): at 2x, a lag that doubles the mismatch
    was passed as often as not (1.999x, interval 1.8-2.2, in a planted run)."""

    STALE_CI_LOW: float = 1.2
    """The interval's low end of that ratio (``STALE_FACTOR``)."""

    STALE_FAIL: float = 5.0
    """The interval's low end at 5x: fail (as ``BASELINE_FAIL``)."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class LagRow(CheckEvidence):
    """The rollouts at one weight lag: their tokens, sequences and vllm_kl."""

    lag: int
    tokens: int = renamed(M.TOKENS.key)
    sequences: int = renamed(M.SEQUENCES.key)
    vllm_kl: float = renamed(M.VLLM_KL.key)


@dataclass(frozen=True, kw_only=True)
class Factor(CheckEvidence):
    """The stale rollouts' vllm_kl over the current ones' and its interval (None: the current
    ones have no mismatch at all)."""

    factor: float
    factor_ci: tuple[float, float] | None


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """Each weight lag's rollouts (from a weight version column), and the stale ones against
    the current ones when there are both."""

    lags: list[LagRow]
    factor: Factor | None = flat(optional=True)


@dataclass(frozen=True, kw_only=True)
class Tagged(CheckEvidence):
    """The weight lag each run is tagged with (no version column)."""

    tagged_lags: dict[str, int]


def run(ctx: Context) -> Check:
    lags = ctx.state.weight_lags
    known = {lag: n for lag, n in lags.tokens.items() if lag is not None and n > 0}
    tagged = tagged_lags(ctx)
    if not known:
        if not tagged:
            return Check(
                LAYER, NAME, TITLE, NA,
                "no weight version in the dumps and no weight_lag tag, so no weight lag",
                None, "keep a weight_version (or model_version) column in the dumps, or tag the run "
                "--tag weight_lag=N, to check staleness",
            )  # fmt: skip
        return _tagged(ctx, tagged)
    fresh = _rate(lags, [lag for lag in known if lag == 0])
    stale = _rate(lags, [lag for lag in known if lag >= 1])
    negative = any(lag < 0 for lag in known)
    factor = None
    if stale is None:
        finding = f"every rollout with a known version used the current weights (vllm_kl {fmt(fresh and fresh[0])})"
        verdict = WARN if negative else OK
    elif fresh is None:
        lag_max = max(known)
        finding = (
            f"every rollout came from older weights (lag up to {lag_max}, vllm_kl "
            f"{fmt(stale[0])}): a policy mismatch by construction"
        )
        verdict = FAIL if stale[0] > MEDIUM_MAX else WARN
    else:
        ratio = stale[0] / fresh[0] if fresh[0] > 0 else math.inf
        half = norm_ppf(1 - (1 - LEVEL) / 2) * math.sqrt(stale[1] + fresh[1])
        ci = (ratio * math.exp(-half), ratio * math.exp(half)) if math.isfinite(ratio) else None
        factor = Factor(factor=ratio, factor_ci=ci)
        verdict = relative(ratio, ci, T.STALE_FACTOR, T.STALE_CI_LOW, T.STALE_FAIL, stale[0])
        finding = (
            f"vllm_kl {fmt(fresh[0])} at lag 0 vs {fmt(stale[0])} at lag >= 1 "
            f"(x{ratio_text(ratio)}, {ci_text(ci)})"
        )
        if negative:
            verdict = worst([verdict, WARN])
    if negative:
        finding += "; some weight versions are ahead of their step"
    evidence = Evidence(lags=_lag_rows(lags, known), factor=factor)
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice_if(verdict, STALE_ADVICE))


def _tagged(ctx: Context, tagged: dict[str, int]) -> Check:
    stale = {run: lag for run, lag in tagged.items() if lag != 0}
    evidence = Tagged(tagged_lags=tagged)
    if not stale:
        finding = "the runs are tagged with weight lag 0 (no version column to confirm it)"
        return Check(LAYER, NAME, TITLE, OK, finding, evidence)
    levels = {
        g.by[K.RUN]: g.metrics.get(M.VLLM_KL)
        for g in ctx.report.split(K.RUN)
        if g.by[K.RUN] in stale
    }
    worst_level = max((v or 0.0 for v in levels.values()), default=0.0)
    listed = ", ".join(
        f"{run} (weight_lag={lag}, vllm_kl {fmt(levels.get(run))})" for run, lag in stale.items()
    )
    finding = f"rollouts made with weights behind the trainer's: {listed}: a policy mismatch"
    verdict = FAIL if worst_level > MEDIUM_MAX else WARN
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, STALE_ADVICE)


def _lag_rows(lags: LagSums, known: dict[int, float]) -> list[LagRow]:
    return [
        LagRow(
            lag=lag,
            tokens=int(n),
            sequences=int(lags.sequences.get(lag, 0)),
            vllm_kl=lags.k3.get(lag, 0.0) / n,
        )
        for lag, n in sorted(known.items())
    ]


def _rate(lags: LagSums, which: list[int]) -> tuple[float, float] | None:
    """The pooled rate of the lags and the sequence-clustered variance of its log."""
    n = sum(lags.tokens[lag] for lag in which)
    if not n:
        return None
    a = sum(lags.k3.get(lag, 0.0) for lag in which)
    moments = [sum(getattr(lags, f).get(lag, 0.0) for lag in which) for f in ("yy", "xx", "xy")]
    g = sum(lags.sequences.get(lag, 0.0) for lag in which)
    var = sandwich_var(np.array(n), np.array(a), *(np.array(m) for m in moments), np.array(g))
    return a / n, float(relvar(var, np.array(a)))
