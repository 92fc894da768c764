"""The vllm-kl / trainer-ppl spiral of BACKGROUND.md: each run's per-step vllm_kl rising (the
trend check's test) together with the trainer's perplexity."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mismatchctl.analysis.diagnose.check import TRAJECTORY, Check, CheckEvidence, grade
from mismatchctl.analysis.diagnose.context import CheckModule, Context, RunSteps, RunView
from mismatchctl.analysis.diagnose.levels import MEDIUM_MAX
from mismatchctl.analysis.diagnose.runs import PerRun, RunResult, per_step_run
from mismatchctl.analysis.diagnose.steps import MIN_STEPS, rising
from mismatchctl.analysis.diagnose.text import fmt, pct
from mismatchctl.stats.robust import spearman, theil_sen

NAME = "spiral"
LAYER = TRAJECTORY
TITLE = "vllm_kl and trainer_ppl rising together"
ORDER = 240
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    TREND_POSITIVE_SHARE: float = 0.7
    """Share of positive pairwise slopes needed to call the trainer's perplexity rising (0.5
    when trendless), for the spiral."""

    SPIRAL_RHO: float = 0.7
    """Spearman correlation of per-step vllm_kl and trainer_ppl, both rising: the vllm-kl /
    fsdp-ppl spiral of BACKGROUND.md (the vllm_kl rise must pass the trend check's test)."""

    VLLM_KL_FLOOR: float = 1e-12
    """Per-step vllm_kl values are floored here before taking logs (bitwise-aligned steps are
    0)."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Spiral(CheckEvidence):
    """One run's Spearman correlation of per-step vllm_kl and trainer_ppl, whether vllm_kl rises
    (the trend check's test), and the share of step pairs along which trainer_ppl rises."""

    spearman: float | None
    vllm_kl_rising: bool
    trainer_ppl_positive_share: float
    steps_left_out: int  # steps whose vllm_kl or trainer_ppl is infinite (a sentinel's overflow)


@dataclass(frozen=True, kw_only=True)
class Evidence(PerRun[Spiral]):
    """Each run's spiral (``runs``)."""


ADVICE = (
    "vllm_kl and the trainer's perplexity climb together: the feedback loop that preceded "
    "collapse in the studies; act before reward drops (sequence-level correction, other "
    "gpus, smaller top-p)"
)


def run(ctx: Context) -> Check:
    return per_step_run(ctx, NAME, TITLE, _spiral, ADVICE, MIN_STEPS, Evidence)


def _positive_share(steps: np.ndarray, logs: np.ndarray) -> float:
    """The share of step pairs with a positive slope (0.5: no line to fit)."""
    ts = theil_sen(steps, logs)
    share = ts["positive_share"]
    return 0.5 if ts["slope"] is None or share is None else share


def usable_steps(s: RunSteps) -> tuple[np.ndarray, int]:
    """The steps whose vllm_kl and trainer_ppl are finite (and the perplexity positive), and
    how many known values were left out as infinite: a sentinel such as -9999 on the rollout
    side overflows its step's vllm_kl, and inf - inf would make every slope NaN."""
    known = ~np.isnan(s.vllm_kl) & ~np.isnan(s.trainer_ppl)
    finite = np.isfinite(s.vllm_kl) & np.isfinite(s.trainer_ppl)
    return finite & (s.trainer_ppl > 0), int(np.count_nonzero(known & ~finite))


def _spiral(view: RunView, s: RunSteps) -> RunResult[Spiral]:
    ok, left_out = usable_steps(s)
    steps = s.steps[ok]
    logs = np.log10(np.maximum(s.vllm_kl[ok], T.VLLM_KL_FLOOR))
    ppl = np.log10(s.trainer_ppl[ok])
    rho = spearman(logs, ppl) if len(steps) >= 3 else None
    ppl_up = _positive_share(steps, ppl)
    kl_up = rising(view)
    together = (
        rho is not None and rho >= T.SPIRAL_RHO and kl_up and ppl_up >= T.TREND_POSITIVE_SHARE
    )
    fail = together and view.trend is not None and view.trend.end > MEDIUM_MAX
    ppl_text = (
        f"trainer_ppl rising on {pct(ppl_up)} of step pairs"
        if len(steps) >= 2
        else "no two steps to read trainer_ppl's rise on"
    )
    finding = (
        f"Spearman {fmt(rho)} between per-step vllm_kl and trainer_ppl; vllm_kl "
        f"{'rising' if kl_up else 'not rising'} (trend check), {ppl_text}"
    )
    if left_out:
        finding += f" ({left_out} step(s) with an infinite value left out)"
    evidence = Spiral(
        spearman=rho,
        vllm_kl_rising=kl_up,
        trainer_ppl_positive_share=ppl_up,
        steps_left_out=left_out,
    )
    return grade(fail, together), finding, evidence
