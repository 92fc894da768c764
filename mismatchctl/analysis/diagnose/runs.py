"""Checks judged run by run: how each run's verdict, sentence and evidence make one check (the
worst run decides)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from mismatchctl.analysis.diagnose.check import (
    NA,
    SEVERITY,
    TRAJECTORY,
    Check,
    CheckEvidence,
    absent,
    advice_if,
    flat,
    worst,
)
from mismatchctl.analysis.diagnose.context import Context, RunSteps, RunView
from mismatchctl.curves.analysis import RunCurves

R = TypeVar("R", bound=CheckEvidence)
RunResult = tuple[str, str, R]  # verdict, finding, evidence
PerStep = Callable[[RunView, RunSteps], RunResult[R]]

ATTACH = "attach the training logs: `mismatchctl ingest-metrics FILE --run RUN`"


@dataclass(frozen=True, kw_only=True)
class WorstRun(CheckEvidence, Generic[R]):
    """The evidence of a check whose worst run decides: that run's own (its keys), and with
    several runs its name (``run``) and every run's (``runs``)."""

    worst: R = flat()
    run: str | None = absent()
    runs: dict[str, R] | None = absent()


@dataclass(frozen=True, kw_only=True)
class PerRun(CheckEvidence, Generic[R]):
    """The evidence of a check judged run by run: every run's (``runs``); ``min_steps``: the
    steps a run needs, when none has them."""

    runs: dict[str, R] | None = absent()
    min_steps: int | None = absent()


W = TypeVar("W", bound=WorstRun)
P = TypeVar("P", bound=PerRun)


def worst_run(runs: dict[str, RunResult[R]], kind: type[W]) -> tuple[str, str, W]:
    """A check judged run by run: the worst run's verdict, sentence and evidence (the first run
    in order among equals); with several runs the sentence names it and the evidence (of the
    check's ``kind``) adds ``run`` and ``runs`` (every run's own)."""
    name = max(runs, key=lambda run: SEVERITY[runs[run][0]])
    verdict, finding, own = runs[name]
    if len(runs) <= 1:
        return verdict, finding, kind(worst=own)
    every = {run: e for run, (_, _, e) in runs.items()}
    return verdict, f"{name}: {finding}", kind(worst=own, run=name, runs=every)


def per_step_run(
    ctx: Context, name: str, title: str, fn: PerStep, advice: str, need: int, kind: type[P]
) -> Check:
    """A trajectory check over the runs with at least ``need`` steps: the worst verdict, the
    sentences of up to three runs that have it, every run's evidence under ``runs`` (evidence
    of the check's ``kind``)."""
    results = {
        run: fn(view, ctx.series[run])
        for run, view in ctx.runs.items()
        if run in ctx.series and len(view.rates) >= need
    }
    if not results:
        return Check(
            TRAJECTORY, name, title, NA,
            f"no run has the {need} steps needed", kind(min_steps=need),
        )  # fmt: skip
    verdict = worst([v for v, _, _ in results.values()])
    shown = [run for run, (v, _, _) in results.items() if v == verdict]
    many = len(results) > 1
    finding = "; ".join((f"{run}: " if many else "") + results[run][1] for run in shown[:3])
    if len(shown) > 3:
        finding += f"; and {len(shown) - 3} more run(s)"
    evidence = kind(runs={run: e for run, (_, _, e) in results.items()})
    return Check(
        TRAJECTORY,
        name,
        title,
        verdict,
        finding,
        evidence,
        advice_if(verdict, advice),
    )


def per_curve_run(
    name: str,
    title: str,
    runs: dict[str, RunCurves],
    missing: str,
    judge: Callable[[RunCurves], RunResult],
    advice: str,
    kind: type[P],
) -> Check:
    """One check over the runs that have the curves it needs: the worst run decides (evidence
    of the check's ``kind``)."""
    if not runs:
        return Check(TRAJECTORY, name, title, NA, missing, None, ATTACH)
    results = {run: judge(c) for run, c in runs.items()}
    verdict = worst([v for v, _, _ in results.values()])
    finding = "; ".join(f"{run}: {f}" for run, (v, f, _) in results.items() if v == verdict)
    evidence = kind(runs={run: e for run, (_, _, e) in results.items()})
    return Check(TRAJECTORY, name, title, verdict, finding, evidence, advice_if(verdict, advice))
