"""The slope of the trainer's logprobs on the rollout's, ``1 + cov(lr, r) / var(lr)``, from each
sequence's sums (``seq_sums.RunSeqSums.line``), with its standard error from a bootstrap over
whole sequences (``RESAMPLES`` resamples, a fixed seed): a temperature on one side puts ``r`` on
a line in the logprob, and the tokens of a response share their context, so the scatter of the
slope is the responses', not the tokens'. ``t``: the slope's distance to 1 over that error."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

RESAMPLES = 200
SEED = 20_240_041


@dataclass(frozen=True)
class LineSlope:
    """The slope, its bootstrap standard error, and ``t = (slope - 1) / se``."""

    slope: float
    se: float
    t: float


def line_slope(line: np.ndarray) -> LineSlope | None:
    """The slope of ``line``'s sequences (rows: count, sum lr, sum lr^2, sum r, sum lr r); None
    under three sequences or without spread in ``lr``."""
    if len(line) < 3:
        return None
    slope = _slope(line.sum(axis=0))
    if slope is None:
        return None
    rng = np.random.default_rng(SEED)
    found = []
    for _ in range(RESAMPLES):
        w = np.bincount(rng.integers(0, len(line), len(line)), minlength=len(line))
        b = _slope(w.astype(np.float64) @ line)
        if b is not None:
            found.append(b)
    if len(found) < RESAMPLES // 2:
        return None
    se = float(np.std(found))
    t = (slope - 1.0) / se if se > 0 else math.copysign(math.inf, slope - 1.0)
    return LineSlope(slope, se, t)


def line_share(total: np.ndarray) -> float | None:
    """The share of ``r``'s variance a line in ``lr`` explains, ``cov(lr, r)^2 / (var(lr)
    var(r))``, from the sums ``total`` (count, lr, lr^2, r, r^2, lr r: ``hot_sequences.LINE``
    summed over sequences); None under two tokens or without spread on either side."""
    n, sx, sxx, sy, syy, sxy = (float(v) for v in total)
    if n < 2:
        return None
    var_x, var_y = sxx - sx * sx / n, syy - sy * sy / n
    if not (var_x > 0 and var_y > 0):
        return None
    cov = sxy - sx * sy / n
    return min(1.0, cov * cov / (var_x * var_y))


def _slope(total: np.ndarray) -> float | None:
    n, sx, sxx, sy, sxy = (float(v) for v in total)
    if n < 2:
        return None
    var = sxx - sx * sx / n
    if not var > 0:
        return None
    return 1.0 + (sxy - sx * sy / n) / var


__all__ = ["LineSlope", "line_share", "line_slope"]
