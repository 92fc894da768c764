"""Another policy without a weight version: signs of r that agree within sequences
(``stats/sign_coherence.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mismatchctl.analysis.diagnose.advice import POLICY_SIGNS_ADVICE
from mismatchctl.analysis.diagnose.check import (
    NA,
    OK,
    TRAJECTORY,
    Check,
    CheckModule,
    advice_if,
    fired,
    grade,
)
from mismatchctl.analysis.diagnose.checks import hardware, localized, regimes, spikes
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.analysis.diagnose.runs import worst_run
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.stats.sign_coherence import SignCoherence, sign_coherence

NAME = "policy_signs"
LAYER = TRAJECTORY
TITLE = "Signs of r agree within sequences (another policy)"
ORDER = 270

CODE_PATH_CHECKS: tuple[CheckModule, ...] = (localized, regimes, spikes, hardware)
"""The checks whose hits name a code path (the cause names it before another policy)."""

READS: tuple[CheckModule, ...] = CODE_PATH_CHECKS


@dataclass(frozen=True)
class Thresholds:
    SIGN_DISPERSION_WARN: float = 1.5
    SIGN_DISPERSION_FAIL: float = 3.0
    SIGN_ALPHA: float = 1e-3
    """Signs of r that agree within sequences (``stats/sign_coherence.py``): the dispersion of
    each sequence's count of r > 0 around its cells' rates is 1 when the signs are independent
    along a sequence (numeric noise) and grows when whole responses lean one way (another
    policy). Warn from 1.5 with the chi-square test (one degree of freedom a sequence) below
    ``SIGN_ALPHA``; fail from 3. Measured on the sample runs (a real tiny model's numerics):
    healthy, improved, kernel, gpu, template, top-p, temperature and MoE runs 0.93-1.25 (the
    highest, ``spiky-6``, a biased split-KV combine on two steps of six), the two runs one
    optimizer step behind 2.1 (``stale-weights``) and 2.5 (``stale-subtle``, which carries no
    version column: no other check without a baseline saw it)."""


T = Thresholds()


def run(ctx: Context) -> Check:
    """Each run's sign dispersion (the worst run's verdict; with several, evidence ``runs``)."""
    runs = {
        run: _judge(sign_coherence(state)) for run, state in ctx.state.hot_sequences.runs().items()
    }
    if not runs or all(found[0] == NA for found in runs.values()):
        return Check(LAYER, NAME, TITLE, NA, "no sequence long enough to test")
    verdict, finding, evidence = worst_run(runs)
    advice = POLICY_SIGNS_ADVICE
    paths = [c.NAME for c in CODE_PATH_CHECKS if fired(ctx.result(c))]
    if verdict != OK and paths:
        finding += f", or a biased kernel on the part of the run the {paths[0]} check names"
        advice = (
            f"fix the code path the {paths[0]} check names first (a biased kernel makes the "
            f"responses it hits lean too), then diagnose again; if they still lean: {advice}"
        )
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice_if(verdict, advice))


def _judge(found: SignCoherence) -> tuple[str, str, dict[str, Any]]:
    evidence: dict[str, Any] = {
        "tested": found.tested,
        "dispersion": found.dispersion,
        "p_value": found.p_value,
        "extreme_share": found.extreme_share,
    }
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
