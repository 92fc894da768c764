"""The trajectory-layer check of another policy without a weight version: signs of r that agree
within sequences (``stats/sign_coherence.py``; thresholds: diagnose_thresholds)."""

from __future__ import annotations

from typing import Any

from mismatchctl.analysis import diagnose_thresholds as T
from mismatchctl.analysis.diagnose_base import (
    FAIL,
    NA,
    OK,
    TRAJECTORY,
    WARN,
    Check,
    Context,
    advice_if,
    grade,
    pct,
    worst_run,
)
from mismatchctl.stats.sign_coherence import SignCoherence, sign_coherence

POLICY_SIGNS_ADVICE = (
    "whole responses lean one way, as when the trainer's weights are not the sampler's (stale "
    "weights, a weight sync that did not land, another checkpoint or LoRA state), not as "
    "independent numeric noise does: compare the weight versions of both sides (keep a "
    "weight_version column in the dumps, or tag the run --tag weight_lag=N); if they match, a "
    "kernel biased along each response (a split-KV combine that drops its row sums leans the "
    "responses it hits too) is the other candidate: diagnose with --baseline on a known-good "
    "run of the same weights; importance sampling would not fix either"
)


def policy_signs(ctx: Context) -> Check:
    """Each run's sign dispersion (the worst run's verdict; with several, evidence ``runs``)."""
    title = "Signs of r agree within sequences (another policy)"
    runs = {
        run: _judge(sign_coherence(state)) for run, state in ctx.state.hot_sequences.runs().items()
    }
    if not runs or all(found[0] == NA for found in runs.values()):
        return Check(TRAJECTORY, "policy_signs", title, NA, "no sequence long enough to test")
    verdict, finding, evidence = worst_run(runs)
    advice = POLICY_SIGNS_ADVICE
    paths = [n for n in CODE_PATH_CHECKS if n in ctx.done and ctx.done[n].verdict in (WARN, FAIL)]
    if verdict != OK and paths:
        finding += f", or a biased kernel on the part of the run the {paths[0]} check names"
        advice = (
            f"fix the code path the {paths[0]} check names first (a biased kernel makes the "
            f"responses it hits lean too), then diagnose again; if they still lean: {advice}"
        )
    return Check(TRAJECTORY, "policy_signs", title, verdict, finding, evidence,
                 advice_if(verdict, advice))  # fmt: skip


CODE_PATH_CHECKS = ("localized", "regimes", "spikes", "hardware")
"""The checks whose hits name a code path (``checks_cause`` names it before another policy)."""


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


__all__ = ["CODE_PATH_CHECKS", "POLICY_SIGNS_ADVICE", "policy_signs"]
