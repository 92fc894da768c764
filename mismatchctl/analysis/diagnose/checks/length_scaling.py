"""Length scaling: does a sequence's summed log ratio grow like sqrt(T) (independent per-token
noise: numerics) or like T (a per-token bias: semantics or another policy)?
(``stats/length_scaling.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mismatchctl.analysis.diagnose.check import NA, OK, TRAJECTORY, WARN, Check, CheckEvidence
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.text import fmt
from mismatchctl.stats.length_scaling import BIAS, NOISE, RISING, LengthScaling, length_scaling

NAME = "length_scaling"
LAYER = TRAJECTORY
TITLE = "Sums of r over a response: noise (sqrt T) or bias (T)"
ORDER = 275
READS: tuple[CheckModule, ...] = ()

ADVICE = (
    "a per-token bias of r grows with the response: look for what differs in the meaning of "
    "the two sides (temperature, top-p/top-k, logit processors, the chat template) or in the "
    "weights (a stale or other checkpoint) before the numerics; `mismatchctl explain RUN` "
    "shows the sums by length"
)


@dataclass(frozen=True)
class Thresholds:
    BIAS_SHARE: float = 0.5
    """Warn when the exponent's interval lies above 3/4 (a bias, ``stats/length_scaling.py``)
    and the bias makes at least half of the mean square of ``sum r`` at the run's median
    length (``b^2 T / (b^2 T + sigma^2)``, i.e. the median length is past the crossover): a
    bias that is a small part of the sums at the lengths the run has is significant but not a
    cause of its mismatch. The calibration corpus' 34 healthy and improved runs give exponents
    of 0.18 to 0.95 where their lengths allow the test (26 runs), none with a bias interval
    (``h-waves``: 0.48); the batch-variant split-K engine decoded in waves
    (``cp-batchvar-waves-48``) 1.86, interval 0.33-3.36: mixed, not warned."""


T = Thresholds()


@dataclass(frozen=True)
class Evidence(CheckEvidence):
    runs: dict[str, LengthScaling]
    """Each run's test, tested or not (``exponent`` None: the lengths span too little)."""


def run(ctx: Context) -> Check:
    found = {
        name: length_scaling(sums.tokens, sums.r_sum)
        for name, sums in sorted(ctx.state.sequences.runs.items())
    }
    tested = {name: res for name, res in found.items() if res.exponent is not None}
    evidence = Evidence(found)
    if not tested:
        return Check(
            LAYER, NAME, TITLE, NA,
            "the responses' lengths do not span enough of a range (a factor of 2 between length "
            "bins of 8 sequences or more) to tell noise from bias",
            evidence,
        )  # fmt: skip
    runs = ctx.state.sequences.runs
    judged = {name: _verdict(res, runs[name].tokens) for name, res in tested.items()}
    name = next((n for n, v in judged.items() if v == WARN), next(iter(tested)))
    res = tested[name]
    prefix = f"{name}: " if len(found) > 1 else ""
    finding = prefix + _sentence(res)
    verdict = judged[name]
    return Check(
        LAYER, NAME, TITLE, verdict, finding, evidence, ADVICE if verdict == WARN else None
    )


def bias_share(res: LengthScaling, median_tokens: float) -> float:
    """The bias's share of the mean square of ``sum r`` at a length."""
    bias = res.bias_per_token**2 * median_tokens
    total = bias + res.noise_per_token
    return bias / total if total > 0 else 0.0


def _verdict(res: LengthScaling, tokens: np.ndarray) -> str:
    median = float(np.median(tokens[tokens > 0])) if (tokens > 0).any() else 0.0
    if res.verdict == BIAS and bias_share(res, median) >= T.BIAS_SHARE:
        return WARN
    return OK


def _sentence(res: LengthScaling) -> str:
    lo, hi = res.interval or (None, None)
    kind = {
        NOISE: "like sqrt(T): independent per-token noise (numerics)",
        BIAS: "like T: a per-token bias (semantics or another policy)",
        RISING: "faster than T: the per-token mismatch grows with the length (a long-context "
        "code path)",
    }.get(res.verdict or "", "between sqrt(T) and T: noise with some bias")
    cross = (
        f"; the bias overtakes the noise past {fmt(res.crossover_tokens)} tokens"
        if res.crossover_tokens is not None
        else ""
    )
    return (
        f"|sum r| grows as T^{fmt(res.exponent)} (95% interval {fmt(lo)}-{fmt(hi)}, "
        f"{res.sequences:,} responses): {kind}; mean r {fmt(res.bias_per_token)} per token" + cross
    )
