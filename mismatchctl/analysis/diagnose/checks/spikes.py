"""Isolated steps above the others: a split of each run's steps whose elevated group is a few
steps (``steps.py``; ``stats/step_regimes.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import TRAJECTORY, Check
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.steps import SPIKES, SplitEvidence, split_check

NAME = "spikes"
LAYER = TRAJECTORY
TITLE = "Isolated steps above the others"
ORDER = 210
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    """None of its own: the split's (``steps.py``: ``MIN_STEPS``, ``REGIME_*``,
    ``SPIKE_MAX_SHARE``)."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Evidence(SplitEvidence):
    """Each run's steps and their split into a few spike steps and the others."""


ADVICE = (
    "look at the spike steps (`mismatchctl report RUN --steps A..B --by-gpu`, `mismatchctl "
    "explain RUN`): which gpu, turn kind or position carries them, and whether entropy, "
    "perplexity and gradient norm spike with them"
)


def run(ctx: Context) -> Check:
    return split_check(ctx, (NAME, TITLE), (SPIKES,), ADVICE, Evidence)
