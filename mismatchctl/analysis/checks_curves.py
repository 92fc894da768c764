"""Checks that read the training curves (``report.curves``): vllm_kl spikes that coincide with
gradient-norm or entropy spikes, and a vllm_kl rise that precedes a reward drop (the signatures
of the collapses in the studies). Definitions of spikes, drops and rises: ``curves.events``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mismatchctl.analysis import diagnose_thresholds as T
from mismatchctl.analysis.diagnose_base import (
    MAX_LISTED,
    NA,
    OK,
    TRAJECTORY,
    Check,
    Context,
    advice_if,
    grade,
    worst,
)
from mismatchctl.curves.analysis import RunCurves
from mismatchctl.curves.series import value_at
from mismatchctl.stats import registry as M

SPIKE_ROLES = ("grad_norm", "entropy")
ATTACH = "attach the training logs: `mismatchctl ingest-metrics FILE --run RUN`"


RunResult = tuple[str, str, dict[str, Any]]  # verdict, finding, evidence


def _per_run(
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


def coincident_spikes(ctx: Context) -> Check:
    runs = {
        run: c
        for run, c in ctx.report.curves.items()
        if any(m.role in SPIKE_ROLES for m in c.spike_matches)
    }
    advice = (
        "mismatch and optimisation blow up at the same steps: inspect those batches "
        f"(`mismatchctl report {ctx.label} --steps A..B --by-gpu`), and consider a sequence-level "
        "correction (`mismatchctl whatif`) before the instability compounds"
    )
    return _per_run(
        "curve_spikes",
        "vllm_kl spikes together with grad-norm or entropy spikes",
        runs,
        "no run has a gradient-norm or entropy curve",
        _spikes,
        advice,
    )


def _spikes(c: RunCurves) -> RunResult:
    found: list[dict[str, Any]] = []
    for m in c.spike_matches:
        if m.role not in SPIKE_ROLES:
            continue
        for x in m.matches[:MAX_LISTED]:
            kl = value_at(c.series[M.VLLM_KL], x.step_a)
            found.append(
                {"role": m.role, "metric": m.metric, "step": x.step_a, "metric_step": x.step_b,
                 M.VLLM_KL: kl}
            )  # fmt: skip
    high = any(f[M.VLLM_KL] is not None and f[M.VLLM_KL] > T.MEDIUM_MAX for f in found)
    verdict = grade(high, bool(found))
    if found:
        finding = f"{len(found)} coincident spike(s): " + ", ".join(
            f"step {f['step']} ({f['metric']})" for f in found[:6]
        )
    else:
        finding = (
            f"{len(c.kl_spikes)} vllm_kl spike(s), none with a gradient-norm or entropy spike "
            "within a step"
        )
    return verdict, finding, {"vllm_kl_spikes": c.kl_spikes[:MAX_LISTED], "coincident": found}


def rise_before_drop(ctx: Context) -> Check:
    advice = (
        "the reward fell after the mismatch grew, the collapse pattern of the studies: fix the "
        "mismatch before the drop (compare the steps before it with "
        f"`mismatchctl compare '{ctx.label}@steps=A..B' '{ctx.label}@steps=C..D'`) and correct "
        "for it (`mismatchctl whatif`)"
    )
    return _per_run(
        "rise_before_drop",
        "vllm_kl rises before a reward drop",
        {run: c for run, c in ctx.report.curves.items() if "reward" in c.roles},
        "no run has a reward curve (in its training logs or its dumps)",
        _rises,
        advice,
    )


def _rises(c: RunCurves) -> RunResult:
    reward = c.roles["reward"]
    evidence = {
        "reward": reward,
        "reward_drops": [d.step for d in c.reward_drops][:MAX_LISTED],
        "rises": [{**p.__dict__, "lead": p.lead} for p in c.rises[:MAX_LISTED]],
    }
    if c.rises:
        p = c.rises[0]
        finding = (
            f"reward ({reward}) drops at step {p.drop_step}, {p.lead} step(s) after vllm_kl rose "
            f"{p.kl_factor:.1f}x (from step {p.kl_rise_step})"
        )
        if len(c.rises) > 1:
            finding += f", and {len(c.rises) - 1} more such drop(s)"
        high = any(r.kl_peak > T.MEDIUM_MAX for r in c.rises)
        return grade(high, True), finding, evidence
    evidence["not_assessed"] = c.unassessed_drops[:MAX_LISTED]
    assessed = len(c.reward_drops) - len(c.unassessed_drops)
    if c.reward_drops and not assessed:
        return (
            NA,
            f"reward drop(s) at step(s) {', '.join(map(str, c.unassessed_drops[:6]))} could not "
            "be assessed: a rise needs 5 vllm_kl steps before the 10-step look-back",
            evidence,
        )
    if c.reward_drops:
        return OK, f"{assessed} reward drop(s), none after a vllm_kl rise", evidence
    return OK, f"no reward drop in {reward}", evidence
