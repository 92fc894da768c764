"""A temperature applied on one side only: the trainer's logprobs a line in the rollout's with a
slope away from 1 that explains part of r's variance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mismatchctl.analysis.diagnose.advice import PROCESSED_HINT
from mismatchctl.analysis.diagnose.check import (
    NA,
    SEMANTIC,
    Check,
    CheckModule,
    advice_if,
    grade,
)
from mismatchctl.analysis.diagnose.checks import alignment, top_p
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.analysis.diagnose.text import fmt, pct
from mismatchctl.stats.comoments import regression

NAME = "temperature"
LAYER = SEMANTIC
TITLE = "Temperature applied on one side only"
ORDER = 80
READS: tuple[CheckModule, ...] = (alignment,)


@dataclass(frozen=True)
class Thresholds:
    TEMP_R2_WARN: float = 0.1
    TEMP_R2_FAIL: float = 0.2
    """Share of the variance of r explained by a line in the rollout logprob. Noise (any size)
    gives under 0.01; a temperature of 0.6-1.2 on one side gives 0.12-0.53 (simulated as for
    the offset check)."""

    TEMP_SLOPE_WARN: float = 0.015
    TEMP_SLOPE_FAIL: float = 0.03
    """|slope - 1| of trainer on rollout logprobs. Noise gives under 0.01; a temperature of 0.9
    or 1.1 on one side gives about 0.04 (the least squares slope is pulled towards 1 because
    the log-partition term varies between contexts, so it understates the temperature's
    distance to 1)."""


T = Thresholds()


def run(ctx: Context) -> Check:
    if skipped := alignment.not_assessed(ctx, LAYER, NAME, TITLE):
        return skipped
    reg = regression(ctx.state.lags[0])
    slope, r2 = reg["slope"], reg["diff_r2"]
    evidence: dict[str, Any] = {**reg, "implied_temperature": slope}
    if slope is None or r2 is None or slope <= 0:
        return Check(
            LAYER, NAME, TITLE, NA,
            f"no positive relation between the sides (slope {fmt(slope)})", evidence,
        )  # fmt: skip
    dev = abs(slope - 1.0)
    fail = dev >= T.TEMP_SLOPE_FAIL and r2 >= T.TEMP_R2_FAIL
    warn = dev >= T.TEMP_SLOPE_WARN and r2 >= T.TEMP_R2_WARN
    finding = (
        f"trainer ~ {fmt(slope)} x rollout logprob + c; the line explains {pct(r2)} of r's variance"
    )
    if fail or warn:
        sharper = "rollout" if slope < 1 else "trainer"
        finding += (
            f": the {sharper} side is sharper, as if its logits were divided by a temperature "
            f"of about {fmt(min(slope, 1 / slope))} that the other side lacks (least squares "
            "understates the gap)"
        )
    if fail and top_p.signature(ctx)[2]:
        fail, warn = False, True  # a top-p renormalisation also bends the line: see that check
        finding += "; the top-p signature is present too, fix that first"
    verdict = grade(fail, warn)
    advice = advice_if(verdict, PROCESSED_HINT)
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice)
