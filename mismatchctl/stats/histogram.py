"""Fixed-edge, mergeable histogram of the log ratio ``r`` and the quantiles read from it.

Why a histogram: quantiles are not mergeable from sums, and keeping the values would break the
bounded-memory, merge-anything design. Because the edges are fixed, two histograms merge by adding
counts, in any order, across chunks, engines and machines.

Layout (``N_BINS`` = 5765 int64 counts, 46 KB per group), ordered by value so that cumulative
counts give exact ranks:

    r <= -1e3 | log bins of |r| (descending) | (-1e-9, 0) | r == 0 | (0, 1e-9) | log bins | r >= 1e3

The log bins cover ``1e-9 <= |r| < 1e3`` with ``PER_DECADE = 240`` bins per decade, so each bin
spans a ratio of ``10**(1/240)`` (about 1.0096).

A value's bin: :func:`hist_index` (numpy: a ``log10``), or, on the report's tokens, the compiled
lookup of the bins' bounds (`hist_lookup.index_tables`), which gives the same bins bit for bit.

Quantile definition: numpy's default ``method="linear"``: with ``h = (n - 1) p``,
``q = x_(j) + (h - j) (x_(j+1) - x_(j))`` for ``j = floor(h)``. The ranks ``j`` and ``j + 1`` are
located exactly from the counts; each order statistic is then estimated inside its bin by
spreading the bin's ``c`` values evenly in log space (the ``k``-th at fraction ``(k + 0.5) / c``).

Resolution (what the tests check): each estimated order statistic ``x`` is within
``RELATIVE_ERROR * |x|`` (``10**(1/240) - 1`` < 0.97 %) when ``1e-9 <= |x| < 1e3``, is exactly
0 when ``x == 0``, and is within ``ABSOLUTE_FLOOR`` = 1e-9 when ``0 < |x| < 1e-9``. The quantile
therefore errs by at most ``RELATIVE_ERROR * max(|x_(j)|, |x_(j+1)|) + 1e-9``. Values beyond
``|r| = 1e3`` are spread between 1e3 and the group's exact minimum or maximum of ``r`` (kept in
the state), the outermost one exactly at the extreme; every quantile is clamped to
``[min r, max r]``, so p0 and p100 are exact.
"""

from __future__ import annotations

import numpy as np

from mismatchctl.stats import registry as M

LOG10_LO = -9  # smallest |r| with a relative bound: 1e-9
LOG10_HI = 3  # |r| >= 1e3 goes to the overflow bins
PER_DECADE = 240
N_LOG = (LOG10_HI - LOG10_LO) * PER_DECADE
ZERO_BIN = N_LOG + 2  # index of r == 0; the positive side is its mirror image
N_BINS = 2 * ZERO_BIN + 1
RELATIVE_ERROR = 10.0 ** (1.0 / PER_DECADE) - 1.0
ABSOLUTE_FLOOR = 10.0**LOG10_LO
OVERFLOW = 10.0**LOG10_HI

QUANTILES: dict[str, float] = {
    M.LOG_RATIO_P01: 0.01,
    M.LOG_RATIO_P50: 0.50,
    M.LOG_RATIO_P99: 0.99,
}


def hist_index(r: np.ndarray) -> np.ndarray:
    """Bin index of every value of ``r`` (finite values; monotone non-decreasing in ``r``)."""
    return float_index(r).astype(np.int64)


def histogram(r: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """Counts per (group, bin) as an ``(n_groups, N_BINS)`` int64 array."""
    flat = float_index(r)
    flat += group * float(N_BINS)
    counts = np.bincount(flat.astype(np.int64), minlength=n_groups * N_BINS)
    return counts.reshape(n_groups, N_BINS)


def float_index(r: np.ndarray) -> np.ndarray:
    """Bin indices as whole float64 values, computed in place (this runs on every token)."""
    f = np.abs(r)
    with np.errstate(divide="ignore"):
        np.log10(f, out=f)  # r == 0 gives -inf, clipped to the underflow offset, then signed to 0
    f *= PER_DECADE
    f -= LOG10_LO * PER_DECADE
    np.floor(f, out=f)
    np.clip(f, -1, N_LOG, out=f)  # -1: underflow 0 < |r| < 1e-9; N_LOG: overflow |r| >= 1e3
    f += 2
    f *= np.sign(r)
    f += ZERO_BIN
    return f


def quantiles(counts: np.ndarray, r_min: float, r_max: float) -> dict[str, float | None]:
    """The ``QUANTILES`` of one group's histogram (None when it is empty)."""
    n = int(counts.sum())
    if n == 0:
        return dict.fromkeys(QUANTILES)
    cum = np.cumsum(counts)
    out: dict[str, float | None] = {}
    for name, p in QUANTILES.items():
        h = (n - 1) * p
        j = int(np.floor(h))
        lo = _order_statistic(cum, counts, j, r_min, r_max)
        hi = _order_statistic(cum, counts, min(j + 1, n - 1), r_min, r_max)
        out[name] = float(np.clip(lo + (h - j) * (hi - lo), r_min, r_max))
    return out


def _order_statistic(
    cum: np.ndarray, counts: np.ndarray, j: int, r_min: float, r_max: float
) -> float:
    """Estimate of the ``j``-th smallest value (0-based) from its bin and its rank inside it."""
    b = int(np.searchsorted(cum, j, side="right"))
    c = int(counts[b])
    k = j - (int(cum[b]) - c)  # rank inside the bin
    if b == ZERO_BIN:
        return 0.0
    offset = abs(b - ZERO_BIN)
    if offset == N_LOG + 2:  # overflow: the outermost value is the exact extreme, spread the rest
        if b > ZERO_BIN:
            return r_max - (c - 1 - k) / c * (r_max - OVERFLOW)
        return r_min + k / c * (-OVERFLOW - r_min)
    side = 1.0 if b > ZERO_BIN else -1.0
    frac = (k + 0.5) / c
    if side < 0:
        frac = 1.0 - frac  # on the negative side a larger value has a smaller magnitude
    if offset == 1:
        return side * ABSOLUTE_FLOOR * frac
    return side * 10.0 ** (LOG10_LO + (offset - 2 + frac) / PER_DECADE)
