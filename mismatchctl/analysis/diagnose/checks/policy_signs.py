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
from mismatchctl.analysis.diagnose.checks import baseline, hardware, localized, regimes, spikes
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

READS: tuple[CheckModule, ...] = (*CODE_PATH_CHECKS, baseline)


@dataclass(frozen=True)
class Thresholds:
    SIGN_DISPERSION_ALONE: float = 1.8
    SIGN_DISPERSION_WARN: float = 1.5
    SIGN_DISPERSION_FAIL: float = 3.0
    SIGN_ALPHA: float = 1e-6
    LENGTH_SCALE: float = 100.0
    """Signs of r that agree within sequences (``stats/sign_coherence.py``): the dispersion of
    each sequence's count of r > 0 around its cells' rates is 1 when the signs are independent
    along a sequence (numeric noise) and grows when whole responses lean one way (another
    policy). With the chi-square test (one degree of freedom a sequence) below ``SIGN_ALPHA``,
    warn from ``SIGN_DISPERSION_ALONE`` (1.8), or from ``SIGN_DISPERSION_WARN`` (1.5) when the
    run also exceeds a known-good baseline (the ``baseline`` check fires); fail from 3.

    Real numerics are not exactly independent along a response (the KV cache's rounding is
    read by every later token), so a healthy run's dispersion sits above 1 and the test alone
    is not calibrated; and over a run of 192 sequences the dispersion itself moves by about 0.1
    to 0.16 (its standard error), so the healthy extreme grows with the number of runs seen.
    The calibration corpus' 34 healthy and improved runs gave 0.88-1.38 (p down to 3e-4) and
    the first gate was 1.5; a held-out corpus of two other models trained anew (seed 13, the
    `*-deep` and `*-mid` runs: docs/diagnose.md "Held-out check, seed 13") gave 22 healthy runs
    0.84-1.57, the highest a healthy run at temperature 0.6 (1.57, p 8e-7: a false alarm at
    1.5), while its runs a checkpoint behind and a step behind gave 1.90 and 1.59-2.90; the
    calibration corpus regenerated on a second machine gave its healthy runs up to 1.37 and its
    stale, partial and wrong weights 1.08-4.3 (a step behind: 1.42 on the mid model, 1.67 on
    the first, 2.23 and 4.3 on the deep and wide ones). Alone,
    a lean of 1.5-1.8 is within healthy noise at that size: the gate alone is 1.8, a quarter
    (1.5 standard errors) above the healthy extreme, and a step behind at 1.59-1.66 is then not
    seen alone (it is against its baseline: 5.6-7.9x, the lean on top of an excess the baseline
    check measures). The sample runs' healthy, kernel, gpu, template, top-p, temperature and
    MoE runs give 0.93-1.25, the two stale runs 2.1 and 2.5. The other users of these
    thresholds (``causes/policy.py``, ``outside.py``, ``sequences.py``) test part of a run
    beside a cause already alarmed and keep ``SIGN_DISPERSION_WARN``.

    Longer responses: a lean that lasts along a response (another policy's, and the healthy
    numerics' faint one) moves a sequence's sign count in proportion to its length and its
    binomial spread in proportion to the root of it, so the dispersion's excess over 1 grows
    with the length. Measured on the sample model: healthy one-turn runs give 0.91-1.17 at 44
    model tokens a response and 1.23-1.32 at 223 (the same model, seed and settings, longer
    turns). The corpus' responses hold 44-96 tokens on average; above ``LENGTH_SCALE`` (100)
    both gates' excess over 1 scales with the tested sequences' mean length (1.8 at 100 tokens
    is 2.6 at 200, 17 at 2,000), so a healthy run of long responses stays quiet (the healthy
    slope above, 0.0012 a token, is a seventh of the gate's). Responses of thousands of tokens
    were not simulated (the sample model's context is 320): the scaling is the lean's
    arithmetic, not a calibration there."""

    BASE_MARGIN: float = 0.5
    BASE_LENGTH_SHARE: float = 0.5
    """Over a baseline, the baseline's own responses say how much their length leans by the
    numerics alone: the family's Llama trained on a 1,024-token context, its healthy runs of
    680 model tokens a response lean 1.00-1.06, not the 4.4 the length scaling asks for, and
    its weights an RL step behind 1.60 (p 2e-7, unseen under the scaled gate). Beyond
    ``LENGTH_SCALE`` tokens, when the baseline's responses are at least half as long
    (``BASE_LENGTH_SHARE``), the gate over it is the baseline's own dispersion plus
    ``BASE_MARGIN`` (0.5: three standard errors of the difference of two runs' dispersions
    over 192 sequences), never below ``SIGN_DISPERSION_WARN`` nor above the scaled gate."""


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
    over = fired(ctx.result(baseline))
    gate = T.SIGN_DISPERSION_WARN if over else T.SIGN_DISPERSION_ALONE
    base = ctx.baseline.signs if over and ctx.baseline is not None else None
    for run, state in ctx.state.hot_sequences.runs().items():
        verdict, finding, signs = _judge(sign_coherence(state), gate, base)
        own = RunSigns(signs=signs)
        steps = _elevated(ctx, run)
        if steps and verdict == OK:
            part = _judge(sign_coherence(in_steps(state, steps)), gate, base)
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


def length_gate(gate: float, mean_tokens: float) -> float:
    """``gate`` for sequences of ``mean_tokens`` tokens on average: its excess over 1 scaled by
    the length beyond ``LENGTH_SCALE`` (``Thresholds``)."""
    if not mean_tokens > T.LENGTH_SCALE:
        return gate
    return 1.0 + (gate - 1.0) * mean_tokens / T.LENGTH_SCALE


def leans(dispersion: float, p_value: float, gate: float) -> bool:
    """The responses lean at ``gate``: a dispersion from it, with the chi-square test below
    ``SIGN_ALPHA``."""
    return dispersion >= gate and p_value < T.SIGN_ALPHA


def base_gate(gate: float, found: SignCoherence, base: SignCoherence | None) -> float | None:
    """The gate over a baseline of long responses: its own dispersion plus ``BASE_MARGIN``,
    within ``SIGN_DISPERSION_WARN`` and the scaled gate (None: responses within
    ``LENGTH_SCALE``, no baseline's signs, or a baseline of much shorter responses)."""
    if base is None or not found.mean_tokens > T.LENGTH_SCALE:
        return None
    if not base.mean_tokens >= T.BASE_LENGTH_SHARE * found.mean_tokens:
        return None
    own = max(T.SIGN_DISPERSION_WARN, base.dispersion + T.BASE_MARGIN)
    return min(own, length_gate(gate, found.mean_tokens))


def _judge(
    found: SignCoherence, gate: float, base: SignCoherence | None = None
) -> tuple[str, str, Signs]:
    """The verdict on one run's (or its elevated steps') sign coherence, warning from
    ``gate``: ``SIGN_DISPERSION_ALONE``, or ``SIGN_DISPERSION_WARN`` over a baseline the run
    exceeds, each scaled to long responses (``length_gate``), or over a baseline of long
    responses from its own lean (``base_gate``); failing from ``SIGN_DISPERSION_FAIL``,
    scaled alike."""
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
    own = base_gate(gate, found, base)
    warn = own if own is not None else length_gate(gate, found.mean_tokens)
    pattern = leans(found.dispersion, found.p_value, warn)
    fail = length_gate(T.SIGN_DISPERSION_FAIL, found.mean_tokens)
    verdict = grade(pattern and found.dispersion >= fail, pattern)
    if own is not None and base is not None:
        finding += (
            f"; the responses hold {found.mean_tokens:.0f} tokens on average, and the "
            f"baseline's ({base.mean_tokens:.0f}) lean {base.dispersion:.2f}x by their numerics "
            f"alone, so a lean warns from {warn:.2g}x"
        )
    elif warn != gate:
        finding += (
            f"; the responses hold {found.mean_tokens:.0f} tokens on average, so a lean warns "
            f"from {warn:.2g}x ({gate:g}x up to {T.LENGTH_SCALE:.0f} tokens: a lean that lasts "
            "along a response spreads the counts in proportion to its length)"
        )
    if verdict != OK:
        finding += ": whole responses lean one way, as another policy makes them"
    return verdict, finding, evidence
