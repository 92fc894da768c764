"""Relative findings: a rate ratio with its interval, judged by the rule of ``levels`` ("relative
findings"), and how the checks write one in a finding and in their evidence."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mismatchctl.analysis.diagnose.check import OK, CheckEvidence, grade
from mismatchctl.analysis.diagnose.levels import LEVEL, LOCAL_CI_LOW, LOCAL_FACTOR, MEDIUM_MAX
from mismatchctl.engines import plan as K
from mismatchctl.stats import TURN_KIND_LABELS
from mismatchctl.stats.localize.result import ratio_text

if TYPE_CHECKING:
    from mismatchctl.analysis.diagnose.context import Context

Ratio = tuple[float, tuple[float, float]] | None  # a rate ratio and its interval


def relative(
    ratio: float | None,
    ci: tuple[float, float] | None,
    factor: float,
    ci_low: float,
    fail_low: float,
    level: float | None = None,
) -> str:
    """The verdict of a relative finding (``levels``: "relative findings"): warn when the point
    reaches ``factor`` and the interval's low end ``ci_low``; fail when the low end reaches
    ``fail_low``, or the pattern is there and ``level`` (the affected part's vllm_kl) is above
    ``MEDIUM_MAX``."""
    if ratio is None or ci is None or not math.isfinite(ratio):
        return OK
    pattern = ratio >= factor and ci[0] >= ci_low
    fail = pattern and (ci[0] >= fail_low or (level is not None and level > MEDIUM_MAX))
    return grade(fail, pattern)


def hotter(found: Ratio) -> bool:
    """A contrast that shows the localized pattern (``LOCAL_FACTOR``, ``LOCAL_CI_LOW``)."""
    if found is None:
        return False
    return relative(found[0], found[1], LOCAL_FACTOR, LOCAL_CI_LOW, math.inf) != OK


def ci_text(ci: tuple[float, float] | None, level: float = LEVEL) -> str:
    """``95% CI 6.1-14`` (two significant digits)."""
    if ci is None:
        return f"{level:.0%} CI n/a"
    return f"{level:.0%} CI {ratio_text(ci[0])}-{ratio_text(ci[1])}"


def ratio_part(found: Ratio) -> str:
    """``6.1x (95% CI 4.2-8.8)``, or ``n/a``."""
    return "n/a" if found is None else f"{ratio_text(found[0])}x ({ci_text(found[1])})"


@dataclass(frozen=True, kw_only=True)
class RatioRow(CheckEvidence):
    """A contrast as evidence: the rate ratio and its interval."""

    rate_ratio: float
    rate_ratio_ci: tuple[float, float]


def ratio_row(found: Ratio) -> RatioRow | None:
    """A contrast as evidence (None: no contrast)."""
    return None if found is None else RatioRow(rate_ratio=found[0], rate_ratio_ci=found[1])


def later_turns(ctx: Context) -> Ratio:
    """The later turns' rate against the first turns' at the same token probabilities and its
    95% interval (``tool_responses``), or None (no later turns, no cube)."""
    return ctx.contrast({K.TURN_KIND: [TURN_KIND_LABELS.index("later")]})
