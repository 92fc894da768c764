"""A code path localized to part of a run: a part (steps, a gpu, positions, an engine batch...)
hotter than the rest of the run at the same token probabilities (``explain`` without a
baseline; ``parts.py`` judges each run's findings)."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.advice import (
    CODE_PATH_ADVICE,
    FIRST_TURNS_LOCAL_ADVICE,
    GROWTH_STEPS_ADVICE,
    attribute_advice,
)
from mismatchctl.analysis.diagnose.as_baseline import as_hot_in_baseline, as_hot_text, region_of
from mismatchctl.analysis.diagnose.check import NA, OK, PATH, Check, CheckEvidence, advice_if, worst
from mismatchctl.analysis.diagnose.checks import turn_edges, turn_ends
from mismatchctl.analysis.diagnose.context import CheckModule, Context, RunView
from mismatchctl.analysis.diagnose.contrasts import later_turns
from mismatchctl.analysis.diagnose.parts import (
    LocalRun,
    firsts_on_attribute,
    firsts_on_first_turns,
    firsts_on_gpus,
    localized_run,
)
from mismatchctl.analysis.diagnose.steps import steps_are_growth
from mismatchctl.analysis.diagnose.weight_lags import stale

NAME = "localized"
LAYER = PATH
TITLE = "A code path localized to part of a run"
ORDER = 150
READS: tuple[CheckModule, ...] = (turn_edges, turn_ends)


@dataclass(frozen=True)
class Thresholds:
    """None of its own: a part is judged by the localized pattern of ``levels``
    (``LOCAL_FACTOR``, ``LOCAL_CI_LOW``, ``LOCAL_FAIL``), and as the later turns seen by
    position by ``TOOL_CI_LOW``."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """Each run's localization (``runs``: ``parts.LocalRun``); ``later_turns``: every run that
    fires found the later turns seen by position."""

    runs: dict[str, LocalRun]
    later_turns: bool


def run(ctx: Context) -> Check:
    """A part of a run (steps, a gpu, positions, an engine batch...) hotter than the rest."""
    if not ctx.runs:
        return Check(LAYER, NAME, TITLE, NA, "no run to localize")
    later = later_turns(ctx)
    results = {
        name: _against_baseline(ctx, view, localized_run(view.local, later, view.cube))
        for name, view in ctx.runs.items()
    }
    verdict = worst([v for v, _, _ in results.values()])
    shown = [run for run, (v, _, _) in results.items() if v == verdict]
    many = len(results) > 1
    finding = "; ".join((f"{run}: " if many else "") + results[run][1] for run in shown[:3])
    firing = [e for v, _, e in results.values() if v != OK]
    evidence = Evidence(
        runs={run: e for run, (_, _, e) in results.items()},
        later_turns=bool(firing) and all(e.later_turns for e in firing),
    )
    advice = STALE_LOCAL_ADVICE if stale(ctx) else CODE_PATH_ADVICE
    if firsts_on_gpus(firing):
        advice = GPU_LOCAL_ADVICE
    if firsts_on_first_turns(firing):
        advice = FIRST_TURNS_LOCAL_ADVICE
    attribute = firsts_on_attribute(firing)
    if attribute is not None:
        advice = attribute_advice(ctx.label, *attribute)
    if evidence.later_turns:
        advice = LATER_TURNS_LOCAL_ADVICE
    if steps_are_growth(ctx, evidence.runs):
        advice = GROWTH_STEPS_ADVICE
    if turn_ends.ends_fault(ctx):
        advice = ENDS_LOCAL_ADVICE
    if turn_edges.template_fault(ctx):
        advice = TEMPLATE_LOCAL_ADVICE
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice_if(verdict, advice))


def _against_baseline(
    ctx: Context, view: RunView, found: tuple[str, str, LocalRun]
) -> tuple[str, str, LocalRun]:
    """With ``--baseline``, a run whose every part found is as hot in the baseline's same
    tokens (``as_baseline.as_hot_in_baseline``) raises no alarm: the stack's own growth with
    the KV position or the turns, which the run's own rest cannot tell from a path."""
    verdict, finding, evidence = found
    if verdict == OK or ctx.baseline is None or not evidence.code_path_findings:
        return found
    regions = [region_of(view, row.where) for row in evidence.code_path_findings]
    same = [as_hot_in_baseline(ctx, r) for r in regions if r is not None]
    if len(same) < len(evidence.code_path_findings) or any(s is None for s in same):
        return found
    ratio, ci = max((s for s in same if s is not None), key=lambda s: s[0])
    return OK, finding + as_hot_text(ratio, ci), evidence


ENDS_LOCAL_ADVICE = (
    "the mismatch sits at the last token of the turns (the turn_ends check): a hot part of the "
    "run by position is the stop handling seen from elsewhere; fix that first, then diagnose "
    "again"
)


TEMPLATE_LOCAL_ADVICE = (
    "the mismatch sits at the start of the turns after tool responses (the turn_edges check): "
    "a hot part of the run by position is that rendering fault seen from elsewhere; fix the "
    "template first, then diagnose again"
)

GPU_LOCAL_ADVICE = (
    "the part found lies on one gpu generation's tokens: the hardware, or a code path only "
    "that generation takes (kernels differ between them); see the hardware and cause checks"
)

STALE_LOCAL_ADVICE = (
    "the rollouts were made with older weights (the staleness check): a part of the run hotter "
    "than the rest may be where the policy moved most between versions (a larger update, a "
    "learning-rate change), not a code path; fix the weight lag first, then diagnose again"
)


LATER_TURNS_LOCAL_ADVICE = (
    "no part found is hotter than the turns after tool responses as a whole: it is those turns "
    "seen by position (long KV lengths live in them), not a code path; see the tool_responses "
    "check"
)
