"""Each run's steps as the checks read them: their split into two groups (spikes, regimes, a step
change) and whether their rate rises along a line (``stats/step_regimes.py`` computes both; the
spikes, regimes, trend and spiral checks judge them, the localized, tool_responses and cause
checks ask whether elevated steps are a code path or a growth)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mismatchctl.analysis.diagnose.check import (
    MAX_LISTED,
    OK,
    Check,
    CheckEvidence,
    absent,
    flat,
    renamed,
)
from mismatchctl.analysis.diagnose.context import RunView
from mismatchctl.analysis.diagnose.contrasts import ci_text, relative
from mismatchctl.analysis.diagnose.runs import PerRun, RunResult, per_step_run
from mismatchctl.analysis.diagnose.text import fmt
from mismatchctl.engines import plan as K
from mismatchctl.stats import registry as M
from mismatchctl.stats.localize.result import ratio_text

if TYPE_CHECKING:
    from mismatchctl.analysis.diagnose.context import Context
    from mismatchctl.analysis.diagnose.parts import LocalRun

MIN_STEPS = 4
"""Fewer steps than this: spikes, regimes, trend and spiral are not assessed. Each step's rate
comes with its own sequence-clustered variance (``stats/step_regimes.py``), so four steps are
enough for an interval; the split into two groups needs two on each side to tell a regime from
a spike."""

REGIME_ALPHA = 0.01
"""The steps differ at all: Cochran's homogeneity test of their log rate ratios rejects at this
level (a healthy run's steps pass it: their rates differ by sampling noise only)."""

REGIME_FACTOR = 1.75
"""The elevated group of steps at 1.75x the others' rate at the same token mix (the same factor
as a localized cell, ``LOCAL_FACTOR``)..."""

REGIME_CI_LOW = 1.5
"""...with the low end of its 95% interval (Bonferroni over the cuts tried) at 1.5 or more."""

REGIME_FAIL = 10.0
"""The interval's low end a decade above the other steps: fail whatever the level."""

SPIKE_MAX_SHARE = 0.25
"""Elevated steps are *spikes* when they are at most a quarter of the steps (isolated events);
more, and they are a second *regime* (a code path some steps take, or a change from a step on)."""

TREND_RISE_WARN = 2.5
"""Fitted rise of the per-step rate from the first to the last step: a rise of 3x (a band apart)
warns, and the gate sits below it (a 3x growth planted over 24 steps was estimated at 2.8x,
interval 2.6-3.2, and passed at 3x)..."""

TREND_CI_LOW = 1.5
"""...when the rise's 95% interval (random-effects line over the steps) starts at 1.5x or more."""

SPIKES, REGIMES, STEP_CHANGE = "spikes", "regimes", "step change"
"""The kinds of split (``split_kind``): the spikes check reports the first, the regimes check
the other two."""

SPLIT_KINDS = (REGIMES, STEP_CHANGE)  # what the regimes check reports


def split_kind(view: RunView) -> str | None:
    """``spikes``, ``regimes`` (or ``step change``: the elevated steps run from one step to the
    last) for a split that passes its tests (the thresholds above), None when the steps are one
    regime."""
    sp = view.split
    if sp is None or len(view.rates) < MIN_STEPS or sp.p_value >= REGIME_ALPHA:
        return None
    if relative(sp.ratio, sp.ci, REGIME_FACTOR, REGIME_CI_LOW, math.inf) == OK:
        return None
    n = len(view.rates)
    if len(sp.elevated) <= max(1, math.floor(SPIKE_MAX_SHARE * n)):
        return SPIKES
    tail = list(range(n - len(sp.elevated), n))
    return STEP_CHANGE if sp.elevated == tail else REGIMES


@dataclass(frozen=True, kw_only=True)
class StepRow(CheckEvidence):
    """A step's tokens, its rate over the run's at the same token mix, and the standard
    deviation of that ratio's log."""

    step: str
    tokens: int = renamed(M.TOKENS.key)
    rate_ratio: float
    log_sd: float


@dataclass(frozen=True, kw_only=True)
class Split(CheckEvidence):
    """The run's steps split in two (``stats/step_regimes.StepSplit``): the kind of split
    (``split_kind``; None: it passes no test), the elevated steps (the first ``MAX_LISTED``),
    their rate over the other steps' with its interval, both groups' vllm_kl, the p-value of
    the steps' homogeneity and the largest factor between two steps."""

    kind: str | None
    elevated_steps: list[str]
    rate_ratio: float
    rate_ratio_ci: tuple[float, float]
    elevated_vllm_kl: float
    other_vllm_kl: float
    homogeneity_p: float
    spread: float


@dataclass(frozen=True, kw_only=True)
class Steps(CheckEvidence):
    """One run's steps as the spikes and regimes checks see them: each step's rate, their
    split when there is one, and ``smooth_rise`` (written when true): the steps follow a rising
    line as closely as two levels."""

    steps: list[StepRow]
    split: Split | None = flat(optional=True)
    smooth_rise: bool | None = absent()


@dataclass(frozen=True, kw_only=True)
class SplitEvidence(PerRun[Steps]):
    """Each run's steps and their split (``runs``: ``Steps``): the evidence of ``spikes`` and of
    ``regimes``, each of which derives its own ``Evidence`` from it."""


def split_check(
    ctx: Context,
    names: tuple[str, str],
    kinds: tuple[str, ...],
    advice: str,
    kind: type[SplitEvidence],
) -> Check:
    """The check (``names``: its name and title) of the split of each run of ``MIN_STEPS``
    steps or more, reporting the splits of ``kinds``; ``kind``: its ``Evidence``."""

    def judge(view: RunView, _: object) -> RunResult[Steps]:
        return split_result(view, kinds)

    return per_step_run(ctx, *names, judge, advice, MIN_STEPS, kind)


def split_result(view: RunView, kinds: tuple[str, ...]) -> RunResult[Steps]:
    """One run's steps as the spikes check (``kinds``: spikes) or the regimes check judges them:
    a split of another kind is ok and named (the other check reports it)."""
    sp, rates = view.split, view.rates
    kind = split_kind(view)
    evidence = Steps(steps=step_rows(view))
    if sp is None:
        return OK, "one regime: no step differs from the others", evidence
    steps = [rates.labels[i] for i in sp.elevated]
    split = Split(
        kind=kind,
        elevated_steps=steps[:MAX_LISTED],
        rate_ratio=sp.ratio,
        rate_ratio_ci=sp.ci,
        elevated_vllm_kl=sp.elevated_level,
        other_vllm_kl=sp.rest_level,
        homogeneity_p=sp.p_value,
        spread=sp.spread,
    )
    evidence = Steps(steps=evidence.steps, split=split)
    listed = ", ".join(steps[:8]) + (f" and {len(steps) - 8} more" if len(steps) > 8 else "")
    body = (
        f"step{'s' if len(steps) > 1 else ''} {listed} at {ratio_text(sp.ratio)}x the other "
        f"steps' rate at the same token mix ({ci_text(sp.ci)}; vllm_kl {fmt(sp.elevated_level)} "
        f"vs {fmt(sp.rest_level)})"
    )
    if kind not in kinds:
        if kind is None:
            return (
                OK,
                f"one regime: the steps differ by a factor {fmt(sp.spread, 2)} at most",
                evidence,
            )
        return (
            OK,
            f"none isolated: {body} form a {kind} (see {REGIMES if kind != SPIKES else SPIKES})",
            evidence,
        )
    verdict = relative(
        sp.ratio, sp.ci, REGIME_FACTOR, REGIME_CI_LOW, REGIME_FAIL, sp.elevated_level
    )
    if kind == STEP_CHANGE:
        body = f"from step {steps[0]} on, {body}"
    if smooth_growth(view):
        evidence = Steps(steps=evidence.steps, split=split, smooth_rise=True)
        body += "; the steps follow a rising line as closely as two levels (the trend check)"
    return verdict, f"{kind}: {body}", evidence


def step_rows(view: RunView) -> list[StepRow]:
    """Each step's tokens and rate ratio to the run's, as evidence."""
    r = view.rates
    return [
        StepRow(
            step=r.labels[i],
            tokens=int(r.tokens[i]),
            rate_ratio=float(r.ratio[i]),
            log_sd=float(np.sqrt(r.log_var[i])),
        )
        for i in range(min(len(r), MAX_LISTED * 10))
    ]


def smooth_growth(view: RunView) -> bool:
    """The run's rate rises (the trend check) and its steps follow the line at least as
    closely as any change point (``StepTrend.smooth``)."""
    return rising(view) and view.trend is not None and view.trend.smooth


def regimes_are_growth(ctx: Context) -> bool:
    """Every run whose steps split into two groups grows smoothly: the groups are a line cut."""
    split = [view for view in ctx.runs.values() if split_kind(view) in SPLIT_KINDS]
    return bool(split) and all(smooth_growth(view) for view in split)


def steps_are_growth(ctx: Context, runs: dict[str, LocalRun]) -> bool:
    """The localized check's first finding in each run (``runs``: its evidence) is a set of
    steps alone, of a run that grows smoothly: the late steps of a growth."""
    firsts = {run: e.code_path_findings[0].where for run, e in runs.items() if e.code_path_findings}
    return bool(firsts) and all(
        set(where) == {K.STEP} and run in ctx.runs and smooth_growth(ctx.runs[run])
        for run, where in firsts.items()
    )


def rising(view: RunView) -> bool:
    """The run's per-step rate rises by the trend check's factor, significantly."""
    tr = view.trend
    return tr is not None and tr.rise >= TREND_RISE_WARN and tr.ci[0] >= TREND_CI_LOW
