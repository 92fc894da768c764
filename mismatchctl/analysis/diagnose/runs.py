"""Checks judged run by run: how each run's verdict, sentence and evidence make one check (the
worst run decides)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mismatchctl.analysis.diagnose.check import (
    NA,
    SEVERITY,
    TRAJECTORY,
    Check,
    advice_if,
    worst,
)
from mismatchctl.analysis.diagnose.context import Context, RunView, StepSeries
from mismatchctl.curves.analysis import RunCurves

RunResult = tuple[str, str, dict[str, Any]]  # verdict, finding, evidence
PerRun = Callable[[RunView, StepSeries], RunResult]

ATTACH = "attach the training logs: `mismatchctl ingest-metrics FILE --run RUN`"


def worst_run(runs: dict[str, RunResult]) -> RunResult:
    """A check judged run by run: the worst run's verdict, sentence and evidence (the first run
    in order among equals); with several runs the sentence names it and the evidence adds
    ``run`` and ``runs`` (every run's own)."""
    name = max(runs, key=lambda run: SEVERITY[runs[run][0]])
    verdict, finding, evidence = runs[name]
    if len(runs) > 1:
        finding = f"{name}: {finding}"
        evidence = {**evidence, "run": name, "runs": {run: e for run, (_, _, e) in runs.items()}}
    return verdict, finding, evidence


def per_step_run(ctx: Context, name: str, title: str, fn: PerRun, advice: str, need: int) -> Check:
    """A trajectory check over the runs with at least ``need`` steps: the worst verdict, the
    sentences of up to three runs that have it, every run's evidence under ``runs``."""
    results = {
        run: fn(view, ctx.series[run])
        for run, view in ctx.runs.items()
        if run in ctx.series and len(view.rates) >= need
    }
    if not results:
        return Check(
            TRAJECTORY, name, title, NA,
            f"no run has the {need} steps needed", {"min_steps": need},
        )  # fmt: skip
    verdict = worst([v for v, _, _ in results.values()])
    shown = [run for run, (v, _, _) in results.items() if v == verdict]
    many = len(results) > 1
    finding = "; ".join((f"{run}: " if many else "") + results[run][1] for run in shown[:3])
    if len(shown) > 3:
        finding += f"; and {len(shown) - 3} more run(s)"
    evidence = {"runs": {run: e for run, (_, _, e) in results.items()}}
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
) -> Check:
    """One check over the runs that have the curves it needs: the worst run decides."""
    if not runs:
        return Check(TRAJECTORY, name, title, NA, missing, {}, ATTACH)
    results = {run: judge(c) for run, c in runs.items()}
    verdict = worst([v for v, _, _ in results.values()])
    finding = "; ".join(f"{run}: {f}" for run, (v, f, _) in results.items() if v == verdict)
    evidence = {"runs": {run: e for run, (_, _, e) in results.items()}}
    return Check(TRAJECTORY, name, title, verdict, finding, evidence, advice_if(verdict, advice))
