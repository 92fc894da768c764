"""Another policy without a weight version: signs of r that agree within sequences
(``stats/sign_coherence.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.advice import POLICY_SIGNS_ADVICE
from mismatchctl.analysis.diagnose.check import (
    NA,
    OK,
    TRAJECTORY,
    Check,
    CheckEvidence,
    absent,
    advice_if,
    fired,
    flat,
    grade,
)
from mismatchctl.analysis.diagnose.checks import hardware, localized, regimes, spikes
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.runs import WorstRun, worst_run
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.stats.sign_coherence import SignCoherence, in_steps, sign_coherence

NAME = "policy_signs"
LAYER = TRAJECTORY
TITLE = "Signs of r agree within sequences (another policy)"
ORDER = 270

CODE_PATH_CHECKS: tuple[CheckModule, ...] = (localized, regimes, spikes, hardware)
STEPS: tuple[CheckModule, ...] = (regimes, spikes)  # the checks that split the steps in two
"""The checks whose hits name a code path (the cause names it before another policy)."""

READS: tuple[CheckModule, ...] = CODE_PATH_CHECKS


@dataclass(frozen=True)
class Thresholds:
    SIGN_DISPERSION_WARN: float = 1.5
    SIGN_DISPERSION_FAIL: float = 3.0
    SIGN_ALPHA: float = 1e-6
    """Signs of r that agree within sequences (``stats/sign_coherence.py``): the dispersion of
    each sequence's count of r > 0 around its cells' rates is 1 when the signs are independent
    along a sequence (numeric noise) and grows when whole responses lean one way (another
    policy). Warn from 1.5 with the chi-square test (one degree of freedom a sequence) below
    ``SIGN_ALPHA``; fail from 3. The calibration corpus' 34 healthy and improved runs give
    0.88-1.38 (p down to 3e-4: real numerics are not exactly independent along a response, so
    the test alone is not calibrated: the gate is six orders of magnitude, two beyond the
    healthy extreme); its runs on other weights 1.66 (one optimizer step behind, p 2e-8) to
    2.39 (a checkpoint behind); the sample runs' healthy, kernel, gpu, template, top-p,
    temperature and MoE runs 0.93-1.25, the two stale runs 2.1 and 2.5."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Signs(CheckEvidence):
    """Sign coherence (``stats/sign_coherence.py``): the sequences tested, the dispersion of
    their counts of r > 0 (1: independent signs), its chi-square p-value and the share of the
    sequences at |z| > 3."""

    tested: int
    dispersion: float
    p_value: float
    extreme_share: float


@dataclass(frozen=True, kw_only=True)
class ElevatedSigns(CheckEvidence):
    """The sign coherence of a run's elevated steps alone (``steps``)."""

    steps: list[int]
    signs: Signs = flat()


@dataclass(frozen=True, kw_only=True)
class RunSigns(CheckEvidence):
    """One run's sign coherence, and its elevated steps' (written for a run whose steps split
    in two and whose whole does not lean)."""

    signs: Signs = flat()
    elevated_steps: ElevatedSigns | None = absent()


@dataclass(frozen=True, kw_only=True)
class Evidence(WorstRun[RunSigns]):
    """The worst run's sign coherence (and with several runs every run's, ``runs``)."""


def run(ctx: Context) -> Check:
    """Each run's sign dispersion (the worst run's verdict; with several, evidence ``runs``);
    for a run whose steps split into two regimes, also the elevated steps' own (weights that
    changed at a step lean those steps' responses only: evidence ``elevated_steps``)."""
    runs: dict[str, tuple[str, str, RunSigns]] = {}
    for run, state in ctx.state.hot_sequences.runs().items():
        verdict, finding, signs = _judge(sign_coherence(state))
        own = RunSigns(signs=signs)
        steps = _elevated(ctx, run)
        if steps and verdict == OK:
            part = _judge(sign_coherence(in_steps(state, steps)))
            own = RunSigns(
                signs=signs, elevated_steps=ElevatedSigns(steps=sorted(steps), signs=part[2])
            )
            if part[0] != OK:
                verdict, finding = part[0], f"in the elevated steps ({len(steps)}): {part[1]}"
        runs[run] = (verdict, finding, own)
    if not runs or all(found[0] == NA for found in runs.values()):
        return Check(LAYER, NAME, TITLE, NA, "no sequence long enough to test")
    verdict, finding, evidence = worst_run(runs, Evidence)
    advice = POLICY_SIGNS_ADVICE
    paths = [c.NAME for c in CODE_PATH_CHECKS if fired(ctx.result(c))]
    if verdict != OK and paths:
        finding += f", or a biased kernel on the part of the run the {paths[0]} check names"
        advice = (
            f"fix the code path the {paths[0]} check names first (a biased kernel makes the "
            f"responses it hits lean too), then diagnose again; if they still lean: {advice}"
        )
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice_if(verdict, advice))


def _elevated(ctx: Context, run: str) -> set[int]:
    """The run's elevated steps when the regimes or spikes check split them off."""
    view = ctx.runs.get(run)
    if view is None or view.split is None or not any(fired(ctx.result(c)) for c in STEPS):
        return set()
    return {int(view.rates.numbers[i]) for i in view.split.elevated}


def _judge(found: SignCoherence) -> tuple[str, str, Signs]:
    evidence = Signs(
        tested=found.tested,
        dispersion=found.dispersion,
        p_value=found.p_value,
        extreme_share=found.extreme_share,
    )
    if found.tested == 0:
        return NA, "no sequence long enough to test", evidence
    finding = (
        f"the count of tokens with r > 0 in each of {found.tested} sequences spreads "
        f"{found.dispersion:.2f}x as much as independent signs give at the same token "
        f"probabilities (1 for numeric noise; chi-square p = {found.p_value:.2g}; "
        f"{pct(found.extreme_share)} of the sequences at |z| > 3)"
    )
    pattern = found.dispersion >= T.SIGN_DISPERSION_WARN and found.p_value < T.SIGN_ALPHA
    verdict = grade(pattern and found.dispersion >= T.SIGN_DISPERSION_FAIL, pattern)
    if verdict != OK:
        finding += ": whole responses lean one way, as another policy makes them"
    return verdict, finding, evidence
