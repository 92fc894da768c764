"""Correlation of two per-step training curves (issue #10): the join on step, Pearson and Spearman
correlation, and the lead-lag view (cross-correlation at lags -5..5, of the step-to-step changes
of both curves, with its number of pairs and a 95% Fisher-z interval).

Pure numeric: numpy and the standard library only. A series is a pair ``(steps, values)``: int64
steps, unique and ascending, and float64 values that may be NaN or +-inf (excluded and counted,
never silently dropped). Every alignment is by step, never by array position, so a missing step
does not shift one curve against the other.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from mismatchctl.stats.robust import ranks

MIN_POINTS = 3  # fewer pairs than this: no correlation (r is None)
DEFAULT_LAGS = range(-5, 6)  # the lead-lag view of issue #10: lags -5..5 steps
# A lead-lag correlation needs this many pairs of step-to-step changes: with fewer, even r = 0
# has a 95% interval wider than -0.63..+0.63, and any lag can look like a lead.
MIN_LAG_PAIRS = 10
CONFIDENCE = 0.95
_Z = NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)  # 1.96
BEST_LAG_TIE = 1e-12  # |r| within this of the largest |r| counts as a tie in best_lag


def check_series(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(steps, values)`` as 1-D int64 / float64 arrays; ValueError unless the lengths match and
    the steps are unique and ascending."""
    s = np.asarray(steps, dtype=np.int64).reshape(-1)
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if len(s) != len(v):
        raise ValueError(f"{len(s)} steps but {len(v)} values")
    if len(s) > 1 and not bool(np.all(np.diff(s) > 0)):
        raise ValueError("steps must be unique and ascending")
    return s, v


@dataclass(frozen=True)
class Aligned:
    """Two series joined on step (inner join), with what the join excluded.

    ``steps``, ``x``, ``y``: the steps present in both tables with a finite value on both sides.
    ``only_x_steps`` / ``only_y_steps``: steps in one table only. ``nonfinite_steps``: steps in both
    tables but with a NaN or +-inf on either side. Every input step is in exactly one of
    ``steps``, ``only_x_steps``, ``only_y_steps``, ``nonfinite_steps`` (the last three are the
    excluded ones, kept in full)."""

    steps: np.ndarray
    x: np.ndarray
    y: np.ndarray
    only_x_steps: list[int] = field(default_factory=list)
    only_y_steps: list[int] = field(default_factory=list)
    nonfinite_steps: list[int] = field(default_factory=list)

    @property
    def n(self) -> int:
        """Number of joined pairs."""
        return len(self.steps)


def align(steps_x: np.ndarray, x: np.ndarray, steps_y: np.ndarray, y: np.ndarray) -> Aligned:
    """Inner join of ``(steps_x, x)`` and ``(steps_y, y)`` on step, keeping finite pairs only."""
    sx, vx = check_series(steps_x, x)
    sy, vy = check_series(steps_y, y)
    common, ix, iy = np.intersect1d(sx, sy, assume_unique=True, return_indices=True)
    a, b = vx[ix], vy[iy]
    ok = np.isfinite(a) & np.isfinite(b)
    return Aligned(
        steps=common[ok],
        x=a[ok],
        y=b[ok],
        only_x_steps=[int(s) for s in np.setdiff1d(sx, sy, assume_unique=True)],
        only_y_steps=[int(s) for s in np.setdiff1d(sy, sx, assume_unique=True)],
        nonfinite_steps=[int(s) for s in common[~ok]],
    )


def outer_join(
    steps_x: np.ndarray, x: np.ndarray, steps_y: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(steps, x, y)`` over the union of the steps, NaN where a series has no row. Useful for the
    event functions, which take one step axis and skip non-finite values."""
    sx, vx = check_series(steps_x, x)
    sy, vy = check_series(steps_y, y)
    steps = np.union1d(sx, sy)
    out_x = np.full(len(steps), np.nan)
    out_y = np.full(len(steps), np.nan)
    out_x[np.searchsorted(steps, sx)] = vx
    out_y[np.searchsorted(steps, sy)] = vy
    return steps, out_x, out_y


def _pairs(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    b = np.asarray(y, dtype=np.float64).reshape(-1)
    if len(a) != len(b):
        raise ValueError(f"{len(a)} x values but {len(b)} y values")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("values must be finite (align() excludes and counts the others)")
    return a, b


def _pearson(a: np.ndarray, b: np.ndarray) -> float | None:
    if len(a) < MIN_POINTS or np.all(a == a[0]) or np.all(b == b[0]):
        return None  # constant: tested exactly, the centred sums of a constant need not be 0
    da, db = a - a.mean(), b - b.mean()
    saa, sbb = float(da @ da), float(db @ db)
    if saa <= 0.0 or sbb <= 0.0:  # underflow of tiny spreads
        return None
    return float(np.clip(float(da @ db) / np.sqrt(saa * sbb), -1.0, 1.0))


def pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    """Pearson correlation, two-pass in float64: ``sum(dx dy) / sqrt(sum(dx^2) sum(dy^2))`` with
    ``dx = x - mean(x)``, ``dy = y - mean(y)``, clipped to [-1, 1].

    None with fewer than ``MIN_POINTS`` pairs or when either side is constant. The values must be
    finite (ValueError otherwise)."""
    return _pearson(*_pairs(x, y))


def spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman correlation: the Pearson correlation of the ranks 1..n, ties given their mean rank.
    None as for :func:`pearson`."""
    a, b = _pairs(x, y)
    if len(a) < MIN_POINTS:
        return None
    return _pearson(ranks(a), ranks(b))


@dataclass(frozen=True)
class LagPoint:
    """Cross-correlation at one lag: ``r`` over ``n`` pairs, with its 95% interval (None when
    there are too few pairs or a side is constant). ``lag > 0``: x leads y by ``lag`` steps (see
    :func:`lead_lag`)."""

    lag: int
    r: float | None
    n: int
    ci_low: float | None = None
    ci_high: float | None = None


def fisher_interval(r: float | None, n: int) -> tuple[float | None, float | None]:
    """The 95% interval of a Pearson ``r`` of ``n`` pairs: ``tanh(atanh(r) -+ 1.96 / sqrt(n -
    3))`` (Fisher's z, exact for a bivariate normal, approximate otherwise); (None, None) for no
    ``r`` or ``n <= 3``; ``(r, r)`` when ``|r| = 1``."""
    if r is None or n <= 3:
        return None, None
    if abs(r) >= 1.0:
        return r, r
    z, half = math.atanh(r), _Z / math.sqrt(n - 3)
    return math.tanh(z - half), math.tanh(z + half)


def first_differences(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(steps, changes)``: ``values(s) - values(s - 1)`` at every step ``s`` whose previous step
    ``s - 1`` is there too (by step, never by position: a missing step leaves no change on either
    side of it); non-finite where either value is."""
    s, v = check_series(steps, values)
    if len(s) < 2:
        return s[:0], v[:0]
    has_previous = np.diff(s) == 1
    return s[1:][has_previous], (v[1:] - v[:-1])[has_previous]


def lead_lag(
    steps: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    lags: Iterable[int] = DEFAULT_LAGS,
    min_pairs: int = MIN_POINTS,
) -> list[LagPoint]:
    """Cross-correlation of x and y at each lag ``k``, by step.

    At lag ``k``: the Pearson correlation over the pairs ``(x at step s, y at step s + k)`` for
    every step ``s`` such that both ``s`` and ``s + k`` are in ``steps`` and both values are finite
    (so an inner join from :func:`align` or an outer join with NaN both work; a missing step
    removes the pairs that need it and shifts nothing); None with fewer than ``min_pairs`` pairs.

    Sign convention: ``k > 0`` compares x with y ``k`` steps later, so a peak at ``k > 0`` reads
    "x leads y by k steps" (x moves first); ``k < 0`` reads "y leads x by -k steps"; ``k = 0`` is
    the plain same-step correlation. Example: if ``y(s) = x(s - 2)``, the peak is at ``k = 2``.
    """
    s, vx = check_series(steps, x)
    _, vy = check_series(steps, y)
    out = []
    for k in lags:
        target = s + int(k)
        idx = np.minimum(np.searchsorted(s, target), max(len(s) - 1, 0))
        hit = (s[idx] == target) if len(s) else np.zeros(0, dtype=bool)
        a, b = vx[hit], vy[idx[hit]]
        ok = np.isfinite(a) & np.isfinite(b)
        a, b = a[ok], b[ok]
        r = _pearson(a, b) if len(a) >= min_pairs else None
        out.append(LagPoint(int(k), r, len(a), *fisher_interval(r, len(a))))
    return out


def change_lead_lag(
    steps: np.ndarray, x: np.ndarray, y: np.ndarray, lags: Iterable[int] = DEFAULT_LAGS
) -> list[LagPoint]:
    """:func:`lead_lag` of the step-to-step changes of x and y (:func:`first_differences`), with
    at least ``MIN_LAG_PAIRS`` pairs per lag. Differencing removes the trends: two curves that
    both drift over a run (monotone, say) correlate fully in levels at every lag, while their
    changes correlate only when one moves with, before or after the other."""
    changed, dx = first_differences(steps, x)
    _, dy = first_differences(steps, y)
    return lead_lag(changed, dx, dy, lags, min_pairs=MIN_LAG_PAIRS)


def best_lag(points: Iterable[LagPoint]) -> LagPoint | None:
    """The lag with the largest ``|r|`` among those with ``r`` not None; None if there is none.

    Values of ``|r|`` within ``BEST_LAG_TIE`` of the largest are ties, broken by the smallest
    ``|lag|``, then the negative lag (so a perfectly periodic series reports its shortest lead,
    and a same-step correlation is not reported as a lead)."""
    usable = [(abs(p.r), p) for p in points if p.r is not None]
    if not usable:
        return None
    top = max(size for size, _ in usable)
    tied = [p for size, p in usable if size >= top - BEST_LAG_TIE]
    return min(tied, key=lambda p: (abs(p.lag), p.lag))
