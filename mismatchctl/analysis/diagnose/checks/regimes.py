"""Steps in a healthy and an elevated regime (or a step change): a split of each run's steps
whose elevated group is more than a few steps (``steps.py``; ``stats/step_regimes.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.advice import GROWTH_STEPS_ADVICE
from mismatchctl.analysis.diagnose.check import TRAJECTORY, Check
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.steps import (
    SPLIT_KINDS,
    SplitEvidence,
    regimes_are_growth,
    split_check,
)

NAME = "regimes"
LAYER = TRAJECTORY
TITLE = "Steps in a healthy and an elevated regime"
ORDER = 220
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    """None of its own: the split's (``steps.py``: ``MIN_STEPS``, ``REGIME_*``,
    ``SPIKE_MAX_SHARE``)."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Evidence(SplitEvidence):
    """Each run's steps and their split into a healthy and an elevated regime."""


ADVICE = (
    "two regimes: some steps run at the healthy level, others far above it; a code path only "
    "some steps take (a kernel chosen by batch shape or KV length, one engine instance, a "
    "gpu) has this signature: `mismatchctl explain RUN` says what the elevated steps share"
)


def run(ctx: Context) -> Check:
    check = split_check(ctx, (NAME, TITLE), SPLIT_KINDS, ADVICE, Evidence)
    if check.next is not None and regimes_are_growth(ctx):
        check.next = GROWTH_STEPS_ADVICE
    return check
