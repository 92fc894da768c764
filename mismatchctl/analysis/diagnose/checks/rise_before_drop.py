"""A vllm_kl rise that precedes a reward drop in the training curves (``report.curves``; rises
and drops as ``curves.events`` defines them): the collapse pattern of the studies."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import (
    MAX_LISTED,
    NA,
    OK,
    TRAJECTORY,
    Check,
    CheckEvidence,
    absent,
    flat,
    grade,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.levels import MEDIUM_MAX
from mismatchctl.analysis.diagnose.runs import PerRun, RunResult, per_curve_run
from mismatchctl.curves.analysis import RunCurves
from mismatchctl.curves.events import Precedence

NAME = "rise_before_drop"
LAYER = TRAJECTORY
TITLE = "vllm_kl rises before a reward drop"
ORDER = 290
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    """None of its own: rises and drops are ``curves.events``'; a rise peaking above
    ``MEDIUM_MAX`` fails."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Rise(CheckEvidence):
    """A vllm_kl rise before a reward drop (``curves.events.Precedence``) and its lead in
    steps."""

    rise: Precedence = flat()
    lead: int


@dataclass(frozen=True, kw_only=True)
class Rises(CheckEvidence):
    """One run's reward curve, its drops and the rises before them (the first ``MAX_LISTED``);
    with no rise, ``not_assessed``: the drops too early to look back from."""

    reward: str
    reward_drops: list[int]
    rises: list[Rise]
    not_assessed: list[int] | None = absent()


@dataclass(frozen=True, kw_only=True)
class Evidence(PerRun[Rises]):
    """Each run's rises and drops (``runs``)."""


def run(ctx: Context) -> Check:
    advice = (
        "the reward fell after the mismatch grew, the collapse pattern of the studies: fix the "
        "mismatch before the drop (compare the steps before it with "
        f"`mismatchctl compare '{ctx.label}@steps=A..B' '{ctx.label}@steps=C..D'`) and correct "
        "for it (`mismatchctl whatif`)"
    )
    return per_curve_run(
        NAME,
        TITLE,
        {run: c for run, c in ctx.report.curves.items() if "reward" in c.roles},
        "no run has a reward curve (in its training logs or its dumps)",
        _rises,
        advice,
        Evidence,
    )


def _rises(c: RunCurves) -> RunResult[Rises]:
    reward = c.roles["reward"]
    evidence = Rises(
        reward=reward,
        reward_drops=[d.step for d in c.reward_drops][:MAX_LISTED],
        rises=[Rise(rise=p, lead=p.lead) for p in c.rises[:MAX_LISTED]],
    )
    if c.rises:
        p = c.rises[0]
        finding = (
            f"reward ({reward}) drops at step {p.drop_step}, {p.lead} step(s) after vllm_kl rose "
            f"{p.kl_factor:.1f}x (from step {p.kl_rise_step})"
        )
        if len(c.rises) > 1:
            finding += f", and {len(c.rises) - 1} more such drop(s)"
        high = any(r.kl_peak > MEDIUM_MAX for r in c.rises)
        return grade(high, True), finding, evidence
    evidence = dataclasses.replace(evidence, not_assessed=c.unassessed_drops[:MAX_LISTED])
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
