"""Robust statistics of short series (per-step values of a run): median/MAD z-scores, the
Theil-Sen slope and Spearman's rank correlation. Series are a few thousand points at most."""

from __future__ import annotations

import math

import numpy as np

MAD_TO_SD = 1.4826  # MAD x 1.4826 estimates the standard deviation of normal data
THEIL_SEN_MAX_POINTS = 2000  # pairwise slopes are O(n^2): longer series are thinned evenly


def robust_z(values: np.ndarray) -> tuple[np.ndarray, float, float]:
    """``(x - median) / (1.4826 MAD)`` per value, the median and the scaled MAD.

    When the MAD is 0 (over half the values equal), the mean absolute deviation stands in for it
    (scaled by sqrt(pi/2) for normal data); when that is 0 too every z is 0 except values that
    differ from the median, which get +-inf."""
    x = np.asarray(values, np.float64)
    if len(x) == 0:
        return x, math.nan, math.nan
    median = float(np.median(x))
    dev = x - median
    scale = MAD_TO_SD * float(np.median(np.abs(dev)))
    if scale == 0:
        scale = math.sqrt(math.pi / 2) * float(np.mean(np.abs(dev)))
    if scale == 0:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(dev == 0, 0.0, np.sign(dev) * np.inf), median, 0.0
    return dev / scale, median, scale


def theil_sen(x: np.ndarray, y: np.ndarray) -> dict[str, float | None]:
    """Median of pairwise slopes (``slope``), ``intercept`` = median(y - slope x), and
    ``positive_share``: the share of pairs with a positive slope among pairs with a non-zero one
    (near 0.5 for a trendless series). None with fewer than two distinct x."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if len(x) > THEIL_SEN_MAX_POINTS:
        keep = np.linspace(0, len(x) - 1, THEIL_SEN_MAX_POINTS).round().astype(np.int64)
        x, y = x[keep], y[keep]
    slopes = _pair_slopes(x, y)
    if not len(slopes):
        return {"slope": None, "intercept": None, "positive_share": None}
    slope = float(np.median(slopes))
    nonzero = slopes[slopes != 0]
    share = float(np.mean(nonzero > 0)) if len(nonzero) else 0.5
    return {
        "slope": slope,
        "intercept": float(np.median(y - slope * x)),
        "positive_share": share,
    }


PAIR_BLOCK = 1 << 16  # pairs of points a block of rows holds (a few of its arrays at a time)


def _pair_slopes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The slope of every pair ``i < j`` with ``x[j] != x[i]``, in the order of
    ``np.triu_indices``, a block of rows at a time: the pairs' indices and differences of
    2,000 points (2M pairs) took five arrays of 16 MB at once, where the slopes need one."""
    n = len(x)
    rows = max(1, PAIR_BLOCK // max(n, 1))
    out = [np.zeros(0)]
    for a in range(0, max(n - 1, 0), rows):
        k = np.arange(a, min(a + rows, n - 1))
        lengths = n - 1 - k
        i = np.repeat(k, lengths)
        j = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths - k - 1, lengths)
        dx = x[j] - x[i]
        ok = dx != 0
        out.append((y[j] - y[i])[ok] / dx[ok])
    return np.concatenate(out)


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties given their average rank."""
    x = np.asarray(x, np.float64)
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], len(x)]
    average = (starts + ends + 1) / 2.0  # mean of the 1-based ranks starts+1 .. ends
    out = np.empty(len(x))
    out[order] = np.repeat(average, ends - starts)
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman's rank correlation; None with fewer than three points or a constant series."""
    if len(x) < 3:
        return None
    rx, ry = ranks(x), ranks(y)
    dx, dy = rx - rx.mean(), ry - ry.mean()
    sxx, syy = dx @ dx, dy @ dy
    if sxx <= 0 or syy <= 0:
        return None
    return float(np.clip((dx @ dy) / math.sqrt(sxx * syy), -1.0, 1.0))
