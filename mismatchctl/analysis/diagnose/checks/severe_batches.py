"""Batches in the severe band (vllm_kl above the study's batch filter), run by run."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import MAX_LISTED, TRAJECTORY, Check, CheckEvidence, grade
from mismatchctl.analysis.diagnose.context import CheckModule, Context, RunSteps
from mismatchctl.analysis.diagnose.levels import HIGH_MAX
from mismatchctl.analysis.diagnose.runs import PerRun, RunResult, per_step_run
from mismatchctl.analysis.diagnose.text import pct

NAME = "severe_batches"
LAYER = TRAJECTORY
TITLE = "Batches in the severe band"
ORDER = 250
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    SEVERE_FAIL_SHARE: float = 0.1
    """Share of batches in the severe band (vllm_kl > 0.1, the study's batch filter) that fails
    (the objective check weighs a correction by it too)."""

    HIGH_WARN_SHARE: float = 0.25
    """Share of batches in the high band or worse that warns (a quarter of training in group
    3)."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Severe(CheckEvidence):
    """One run's share of batches in the severe band, in the high band or worse, and the
    severe ones' steps (the first ``MAX_LISTED``)."""

    severe_share: float
    high_or_severe_share: float
    severe_steps: list[int]


@dataclass(frozen=True, kw_only=True)
class Evidence(PerRun[Severe]):
    """Each run's severe batches (``runs``)."""


def run(ctx: Context) -> Check:
    advice = (
        f"batches above vllm_kl {HIGH_MAX:g} were filtered out in the study; see the objective "
        "check and `mismatchctl whatif` for what a filter or a correction would remove"
    )
    return per_step_run(ctx, NAME, TITLE, lambda _, s: _severe(s), advice, 1, Evidence)


def _severe(s: RunSteps) -> RunResult[Severe]:
    n = len(s.bands)
    severe = [int(st) for st, b in zip(s.steps, s.bands, strict=True) if b == "severe"]
    high = sum(b in ("high", "severe") for b in s.bands)
    share, high_share = len(severe) / n, high / n
    verdict = grade(share >= T.SEVERE_FAIL_SHARE, bool(severe) or high_share >= T.HIGH_WARN_SHARE)
    finding = (
        f"{len(severe)} of {n} batches severe ({pct(share)}), {pct(high_share)} high or severe"
    )
    evidence = Severe(
        severe_share=share, high_or_severe_share=high_share, severe_steps=severe[:MAX_LISTED]
    )
    return verdict, finding, evidence
