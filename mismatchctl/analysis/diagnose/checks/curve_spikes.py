"""vllm_kl spikes that coincide with gradient-norm or entropy spikes in the training curves
(``report.curves``; spikes as ``curves.events`` defines them): the signature of the collapses
in the studies."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import (
    MAX_LISTED,
    TRAJECTORY,
    Check,
    CheckEvidence,
    grade,
    renamed,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.levels import MEDIUM_MAX
from mismatchctl.analysis.diagnose.runs import PerRun, RunResult, per_curve_run
from mismatchctl.curves.analysis import RunCurves
from mismatchctl.curves.series import value_at
from mismatchctl.stats import registry as M

NAME = "curve_spikes"
LAYER = TRAJECTORY
TITLE = "vllm_kl spikes together with grad-norm or entropy spikes"
ORDER = 280
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    """None of its own: spikes are ``curves.events``'; a coincident spike above ``MEDIUM_MAX``
    fails."""


T = Thresholds()

SPIKE_ROLES = ("grad_norm", "entropy")


@dataclass(frozen=True, kw_only=True)
class Coincident(CheckEvidence):
    """A vllm_kl spike at ``step`` with a spike of a curve (``role``: grad_norm or entropy) at
    ``metric_step``, and vllm_kl there."""

    role: str
    metric: str
    step: int
    metric_step: int
    vllm_kl: float | None = renamed(M.VLLM_KL.key)


@dataclass(frozen=True, kw_only=True)
class Spikes(CheckEvidence):
    """One run's vllm_kl spikes (their steps) and those that coincide with a curve's (the first
    ``MAX_LISTED`` of each)."""

    vllm_kl_spikes: list[int]
    coincident: list[Coincident]


@dataclass(frozen=True, kw_only=True)
class Evidence(PerRun[Spikes]):
    """Each run's spikes (``runs``)."""


def run(ctx: Context) -> Check:
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
    return per_curve_run(
        NAME, TITLE, runs, "no run has a gradient-norm or entropy curve", _spikes, advice, Evidence
    )


def _spikes(c: RunCurves) -> RunResult[Spikes]:
    found: list[Coincident] = []
    for m in c.spike_matches:
        if m.role not in SPIKE_ROLES:
            continue
        for x in m.matches[:MAX_LISTED]:
            kl = value_at(c.series[M.VLLM_KL], x.step_a)
            found.append(
                Coincident(role=m.role, metric=m.metric, step=x.step_a, metric_step=x.step_b,
                           vllm_kl=kl)
            )  # fmt: skip
    high = any(f.vllm_kl is not None and f.vllm_kl > MEDIUM_MAX for f in found)
    verdict = grade(high, bool(found))
    if found:
        finding = f"{len(found)} coincident spike(s): " + ", ".join(
            f"step {f.step} ({f.metric})" for f in found[:6]
        )
    else:
        finding = (
            f"{len(c.kl_spikes)} vllm_kl spike(s), none with a gradient-norm or entropy spike "
            "within a step"
        )
    return verdict, finding, Spikes(vllm_kl_spikes=c.kl_spikes[:MAX_LISTED], coincident=found)
