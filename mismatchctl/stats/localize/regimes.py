"""Regimes of an ordered batch dimension: the step of a long run searched as ranges, not as sets.

A run of hundreds of steps is an ordered sequence of batches. A fault lives in a regime of it:
from some step on (a change point), in an interval of steps, or every k-th step (a periodic
batch shape). An arbitrary set of its values (the hottest half of 181 steps) fits the noise of
each step and names nothing a person can act on; the refiner (``localize.refine``) tries, for
such a *regime dimension* (``is_regime``), contiguous intervals and every-k-th values instead
of sets ranked by their rates, keeps a region's values in at most :data:`MAX_RUNS` ranges when
it prunes, widens or merges them, and names what it finds by its structure
(``stats/value_names.py``).

The best interval is the one whose contrast with the rest of the region (its other values, at
the model's expectation: the refiner's ``within``) has the largest z; it stands for every
interval scanned, so the refiner counts them all among the regions examined (Bonferroni).
Steps are a sequence dimension: the moments of an interval and of its rest add exactly.
"""

from __future__ import annotations

import numpy as np

from mismatchctl.stats.cube.cube import Field
from mismatchctl.stats.localize.math import div, own_var, relvar
from mismatchctl.stats.localize.search import log_z
from mismatchctl.stats.localize.tables import SideTables
from mismatchctl.stats.localize.thresholds import LocalizeThresholds
from mismatchctl.stats.value_names import MAX_RUNS, MIN_PERIODIC, runs

REGIME_DIMS = frozenset({"step"})  # ordered batch dimensions


def is_regime(t: SideTables, d: int, th: LocalizeThresholds) -> bool:
    """Whether ``d`` is an ordered batch dimension the target has more than ``regime_values``
    values (or blocks) of."""
    dim = t.spec.dims[d]
    if not dim.ordered or dim.name not in REGIME_DIMS:
        return False
    return int(np.count_nonzero(t.n[(d,)] > 0)) > th.regime_values


def readable(mask: np.ndarray) -> bool:
    """A regime dimension's set: at most ``MAX_RUNS`` ranges of consecutive values."""
    return len(runs(np.flatnonzero(mask))) <= MAX_RUNS


def run_ends(mask: np.ndarray) -> np.ndarray:
    """The values at either end of a range of the set (pruning one keeps the ranges)."""
    values = np.flatnonzero(mask)
    return np.array([v for a, b in runs(values) for v in sorted({a, b})], dtype=np.int64)


def next_to(mask: np.ndarray, v: int) -> bool:
    """Whether value ``v`` extends a range of the set (widening by it keeps the ranges)."""
    return bool((v > 0 and mask[v - 1]) or (v + 1 < len(mask) and mask[v + 1]))


def filled(values: np.ndarray, within: np.ndarray) -> np.ndarray:
    """The levels from the first of ``values`` to the last that ``within`` allows: a range of
    steps, the steps without tokens in the region's cells included (they add nothing to its
    sums, and the range is named as one)."""
    levels = np.arange(len(within))
    return np.flatnonzero(within & (levels >= values[0]) & (levels <= values[-1]))


def filled_all(subsets: list[np.ndarray], within: np.ndarray) -> list[np.ndarray]:
    """:func:`filled` of every set of values (each sorted) at once: the levels ``within``
    allows, from the first of each set to its last, found by two searches of all the sets'
    ends (the refiner asks for hundreds of a long run's ranges in every move)."""
    if not subsets:
        return []
    allowed = np.flatnonzero(within)
    lo = np.searchsorted(allowed, [v[0] for v in subsets], side="left")
    hi = np.searchsorted(allowed, [v[-1] for v in subsets], side="right")
    return [allowed[a:b].copy() for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]


def best_interval(
    values: np.ndarray, mom: np.ndarray, m: np.ndarray, th: LocalizeThresholds
) -> tuple[np.ndarray, int] | None:
    """Of the intervals of at least two of ``values`` (sorted levels; ``mom``/``m`` their
    moments and model masses) that touch neither end (the ranges from either end and the single
    values are tried as such), the one most significantly hotter than the rest, and how many
    were scanned; None when none is ``min_specificity`` times hotter."""
    k = len(values)
    if k < 5:
        return None
    lo, hi = np.triu_indices(k - 2, 1)  # inner positions 1..k-2, at least two values
    lo, hi = lo + 1, hi + 1
    pm = np.vstack([np.zeros((1, mom.shape[1])), np.cumsum(mom, axis=0)])
    pmass = np.r_[0.0, np.cumsum(m)]
    inside = pm[hi + 1] - pm[lo]
    outside = pm[-1] - inside
    m_in = pmass[hi + 1] - pmass[lo]
    z = _contrast_z(inside, m_in, outside, pmass[-1] - m_in, th)
    if not np.isfinite(z).any():
        return None
    best = int(np.argmax(z))
    return values[lo[best] : hi[best] + 1], len(z)


def best_period(
    values: np.ndarray, mom: np.ndarray, m: np.ndarray, th: LocalizeThresholds
) -> tuple[np.ndarray, int] | None:
    """Of the sets of every p-th value (``2 <= p <= max_period``, each phase; at least
    ``MIN_PERIODIC`` values, not all), the one most significantly hotter than the rest, and how
    many were scanned; None when none is ``min_specificity`` times hotter."""
    sets = [
        values[values % p == q]
        for p in range(2, th.max_period + 1)
        for q in range(p)
        if MIN_PERIODIC <= np.count_nonzero(values % p == q) < len(values)
    ]
    if not sets:
        return None
    member = np.array([np.isin(values, s) for s in sets], dtype=np.float64)
    inside, m_in = member @ mom, member @ m
    z = _contrast_z(inside, m_in, mom.sum(axis=0) - inside, float(m.sum()) - m_in, th)
    if not np.isfinite(z).any():
        return None
    return sets[int(np.argmax(z))], len(sets)


def _contrast_z(
    inside: np.ndarray,
    m_in: np.ndarray,
    outside: np.ndarray,
    m_out: np.ndarray,
    th: LocalizeThresholds,
) -> np.ndarray:
    """z of each part against the rest (independent parts, as the refiner's ``within``); -inf
    where the part is not ``min_specificity`` times hotter."""
    a_in, a_out = inside[:, Field.K3], outside[:, Field.K3]
    s = div(div(a_in, m_in, np.nan), div(a_out, m_out, np.nan), np.nan)
    var = relvar(own_var(inside), a_in) + relvar(own_var(outside), a_out)
    return np.where(s >= th.min_specificity, log_z(s, var), -np.inf)
