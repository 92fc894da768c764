"""What the cause (``checks/cause.py``) asks of the checks it reads beyond their verdicts: whether
code-path hits are a gpu's, or a growth seen step by step; whether an excess over a baseline
sits in the rare tokens; and the remedies it words from their findings."""

from __future__ import annotations

import shlex

from mismatchctl.analysis.diagnose.advice import HARDWARE_ADVICE
from mismatchctl.analysis.diagnose.check import FAIL, MAX_LISTED, WARN, Check, evidence_of
from mismatchctl.analysis.diagnose.checks import (
    baseline,
    hardware,
    localized,
    low_probability,
    regimes,
    spikes,
    tool_responses,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.parts import firsts_on_gpus
from mismatchctl.analysis.diagnose.steps import (
    REGIME_FACTOR,
    SplitEvidence,
    regimes_are_growth,
    steps_are_growth,
)
from mismatchctl.engines import plan as K
from mismatchctl.stats import registry as M


def names_of(*checks: CheckModule) -> set[str]:
    """The names of these checks."""
    return {c.NAME for c in checks}


def later_by_position_advice(ctx: Context) -> str:
    """The remedy of the tool turns' cause when the localized check found them by position
    only (under the tool_responses check's own gate)."""
    label = shlex.quote(ctx.label)
    gate = tool_responses.T.TOOL_RATIO_WARN
    return (
        "the later turns, seen by position, are hotter than the rest at the same token "
        "probabilities (the localized check), a little under the tool_responses check's "
        f"{gate:g}x as a whole: look at the worst later turns (`mismatchctl tokens "
        f"{label} --where turn_kind=later`), how the two sides take in the tool output (its "
        "token ids on both sides, the engine's prefill and prefix caching of it); a code path "
        f"that only long contexts take looks the same: `mismatchctl explain {label}` by "
        "kv_position"
    )


def excess_in_rare_bins(ctx: Context, base: Check | None) -> bool:
    """The run is worse than the baseline, but its probability bins with enough tokens to test
    are not: the excess sits in the bins too small to test, and the low-probability bins hold
    ``LOWPROB_CONCENTRATION`` times their share of tokens in K3 (the rare tokens, below the
    level at which the low-probability check alone warns)."""
    e = evidence_of(base, baseline.Evidence)
    if base is None or base.verdict not in (WARN, FAIL) or e is None:
        return False
    if e.concentrated_in != K.BIN:
        return False
    low = evidence_of(ctx.result(low_probability), low_probability.Evidence)
    concentration = low.concentration if low is not None else None
    return concentration is not None and concentration >= low_probability.T.LOWPROB_CONCENTRATION


def gpu_only(ctx: Context, paths: list[Check]) -> bool:
    """The code-path findings point at gpus: the hardware check; the localized check's first
    finding in each run (the search's largest specific excess; the later ones may be that one
    seen through other dimensions, which the cube cannot always tell) on some gpus, alone or
    with other dimensions (a long-context kernel that only one gpu generation takes is that
    hardware's); and elevated steps that are the hottest gpu's (``steps_follow_gpu``)."""
    names = {c.name for c in paths}
    gpu_or_part = names_of(hardware, localized)
    if names - {*gpu_or_part, *names_of(*STEP_CHECKS)} or not names & gpu_or_part:
        return False
    steps = [c for c in paths if c.name in names_of(*STEP_CHECKS)]
    if steps and not steps_follow_gpu(ctx, steps):
        return False
    local = evidence_of(next((c for c in paths if c.name == localized.NAME), None),
                        localized.Evidence)  # fmt: skip
    return local is None or firsts_on_gpus(local.runs.values())


STEP_CHECKS: tuple[CheckModule, ...] = (regimes, spikes)  # code-path hits that are steps


def other_gpus_advice(mine: list[str], theirs: list[str]) -> str:
    """The remedy of a uniform excess over a baseline that ran on other gpus."""
    return (
        f"the run ran on {', '.join(mine)}, the baseline on {', '.join(theirs)}: an excess "
        "spread over every part of the run is what another gpu generation's kernels give (or a "
        "policy mismatch: the data cannot tell them apart); compare with a baseline on the same "
        f"gpus (or a few steps of this run on {theirs[0]}), and the weight versions of both sides; "
        f"{HARDWARE_ADVICE}"
    )


def growth_by_steps(ctx: Context, check: Check) -> bool:
    """A code-path hit that is only a smooth growth seen step by step: the regimes check, or a
    localized check whose first finding in each run is a set of steps, where every run it
    speaks of rises (the trend check) and follows its line at least as closely as any change
    point (``StepTrend.smooth``). A fault that switches on at one step keeps its two levels and
    stays a code path; a part of the run at other dimensions (a gpu, long KV positions) too."""
    if check.name == regimes.NAME:
        return regimes_are_growth(ctx)
    local = evidence_of(check, localized.Evidence)
    if local is not None:
        return steps_are_growth(ctx, local.runs)
    return False


def steps_follow_gpu(ctx: Context, steps: list[Check]) -> bool:
    """The elevated steps of the step checks are the hottest gpu's (one run; that gpu by the
    hardware check): on the other gpus together, those steps' vllm_kl is under
    ``REGIME_FACTOR`` times the other steps' (a gpu whose fault grows over the run makes a
    step change of the whole run; a fault of some steps on every gpu stays a code path)."""
    gpus = evidence_of(ctx.result(hardware), hardware.Evidence)
    factors = gpus.factor_over_others_median if gpus else None
    if len(ctx.runs) != 1 or not factors:
        return False
    hot = max(factors, key=lambda g: factors[g] or 0.0)
    for check in steps:
        found = evidence_of(check, SplitEvidence)  # the regimes' or the spikes' evidence
        run = next(iter((found.runs or {}).values()), None) if found is not None else None
        elevated = {str(s) for s in run.split.elevated_steps} if run and run.split else set()
        if not elevated or len(elevated) >= MAX_LISTED:  # none, or the list is cut short
            return False
        sums = {True: [0.0, 0.0], False: [0.0, 0.0]}  # elevated? -> [tokens, K3 mass]
        for g in ctx.report.split(K.GPU, K.STEP):
            n, vk = g.metrics.get(M.TOKENS), g.metrics.get(M.VLLM_KL)
            if g.by[K.GPU] in (hot, None) or not n or vk is None:
                continue
            row = sums[str(g.by[K.STEP]) in elevated]
            row[0] += n
            row[1] += vk * n
        (n_e, a_e), (n_o, a_o) = sums[True], sums[False]
        if not (n_e and n_o and a_o > 0):
            return False
        if (a_e / n_e) / (a_o / n_o) >= REGIME_FACTOR:
            return False
    return True
