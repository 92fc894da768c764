"""An upward trend of each run's per-step rate: a random-effects line over the steps
(``stats/step_regimes.py``), its fitted rise from the first step to the last."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import OK, TRAJECTORY, Check, CheckEvidence, absent
from mismatchctl.analysis.diagnose.context import CheckModule, Context, RunSteps, RunView
from mismatchctl.analysis.diagnose.contrasts import ci_text, relative
from mismatchctl.analysis.diagnose.runs import PerRun, RunResult, per_step_run
from mismatchctl.analysis.diagnose.steps import MIN_STEPS, TREND_CI_LOW, TREND_RISE_WARN
from mismatchctl.analysis.diagnose.text import fmt
from mismatchctl.stats.localize.result import ratio_text

NAME = "trend"
LAYER = TRAJECTORY
TITLE = "Upward trend of the per-step rate"
ORDER = 230
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    """With the rise's gates that other checks share (``steps.py``: ``TREND_RISE_WARN``,
    ``TREND_CI_LOW``): ..."""

    TREND_RISE_FAIL: float = 10.0
    """The interval's low end a decade up: fail (the "not static" mismatch of BACKGROUND.md: once
    it climbs, it keeps going); also any rise that ends above ``MEDIUM_MAX``."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Trend(CheckEvidence):
    """One run's fitted line (``stats/step_regimes.StepTrend``): the rise of the rate from the
    first step to the last with its interval, the fitted vllm_kl at both ends, the steps'
    spread around the line and their count; none of it without a line."""

    rise: float | None = absent()
    rise_ci: tuple[float, float] | None = absent()
    start_vllm_kl: float | None = absent()
    end_vllm_kl: float | None = absent()
    spread: float | None = absent()
    steps: int | None = absent()


@dataclass(frozen=True, kw_only=True)
class Evidence(PerRun[Trend]):
    """Each run's line (``runs``)."""


ADVICE = (
    "the mismatch grows as training goes on: a run entering a numerically sensitive region "
    "keeps producing high-mismatch batches; find the step it starts at and check what "
    "changed there (learning rate, data, gpus), and `mismatchctl explain 'RUN@steps=LATE' "
    "--baseline 'RUN@steps=EARLY'` (mix or rate?)"
)


def run(ctx: Context) -> Check:
    return per_step_run(ctx, NAME, TITLE, _trend, ADVICE, MIN_STEPS, Evidence)


def _trend(view: RunView, _: RunSteps) -> RunResult[Trend]:
    tr = view.trend
    if tr is None:
        return OK, "too few steps with a rate to fit a line", Trend()
    evidence = Trend(
        rise=tr.rise,
        rise_ci=tr.ci,
        start_vllm_kl=tr.start,
        end_vllm_kl=tr.end,
        spread=tr.spread,
        steps=tr.steps,
    )
    verdict = relative(tr.rise, tr.ci, TREND_RISE_WARN, TREND_CI_LOW, T.TREND_RISE_FAIL, tr.end)
    finding = (
        f"fitted rate x{ratio_text(tr.rise)} from the first to the last step ({ci_text(tr.ci)}; "
        f"vllm_kl {fmt(tr.start)} -> {fmt(tr.end)} at the run's token mix)"
    )
    return verdict, finding, evidence
