"""The r-histogram's bin of a value without a logarithm: a lookup table of every bin's bounds
(:func:`index_tables`) that the compiled kernels (``stats/kernels.py``) read, found from and
checked against :func:`histogram.hist_index` and the lookup's numpy twin
(``stats/kernels_numpy.py``) bit for bit."""

from __future__ import annotations

from functools import cache
from typing import NamedTuple

import numpy as np

from mismatchctl.stats import kernels_numpy  # the compiled lookup's twin, bit for bit
from mismatchctl.stats.histogram import N_LOG, ZERO_BIN, float_index, hist_index


class IndexTables(NamedTuple):
    """What the compiled ``hist_index`` (``stats/kernels.py``) reads a bin from, without a log.

    ``bounds[j + 1]`` (``j`` = 0 .. ``N_LOG``) is the smallest positive double whose level (the
    clipped ``floor(log10(x) * PER_DECADE - LOG10_LO * PER_DECADE)`` of :func:`float_index`,
    computed by that very code) is ``>= j``; ``bounds[0]`` is 0 and the last is NaN (no value reaches it), sentinels.
    A positive double's top ``SHIFT`` mantissa bits and its exponent pick a bucket of
    ``table`` (buckets from exponent ``e_lo`` on; those below and above are clamped to the first
    and last), holding the level of the bucket's first double; a bucket spans less than a bin,
    so the level of ``x`` is the bucket's, plus one when ``x`` reaches the next bound."""

    bounds: np.ndarray
    table: np.ndarray
    e_lo: int
    shift: int


SHIFT = 8  # mantissa bits of a bucket: 2**-8 of an octave, under a bin's 10**(1/240)


@cache
def index_tables() -> IndexTables | None:
    """The lookup of every bin's bounds, found by bisection with :func:`float_index` itself (so
    the bins are those of the numpy code on this machine, bit for bit), and checked on every
    bound, the double below it and every bucket's first and last double; None when a check
    fails (a ``log10`` that is not monotone), and the caller keeps the numpy code."""
    level = np.arange(0, N_LOG + 1, dtype=np.float64)
    lo = np.ones(level.shape, np.int64)  # the bits of the smallest positive double
    hi = np.full(level.shape, np.float64(np.inf).view(np.int64))
    while np.any(lo < hi):
        mid = lo + (hi - lo) // 2
        reached = _levels(mid.view(np.float64)) >= level
        hi = np.where(reached, mid, hi)
        lo = np.where(reached, lo, mid + 1)
    bounds = np.concatenate([[0.0], lo.view(np.float64), [np.nan]])
    e_lo, e_hi = int(lo[0] >> 52), int(lo[-1] >> 52)
    exponents = np.arange(e_lo, e_hi + 1, dtype=np.int64)[:, None] << 52
    firsts = (exponents | (np.arange(1 << SHIFT, dtype=np.int64) << (52 - SHIFT))).reshape(-1)
    table = (np.searchsorted(bounds[1:-1], firsts.view(np.float64), side="right") - 1).astype(
        np.int32
    )
    if np.any(np.diff(bounds[1:-1]) <= 0) or np.any(np.diff(table) > 1):
        return None
    tables = IndexTables(bounds, table, e_lo, SHIFT)

    probe = np.concatenate([lo, lo - 1, firsts, firsts - 1, firsts[-1:] + (1 << (52 - SHIFT))])
    probe = probe[probe > 0].view(np.float64)
    probe = np.concatenate([probe, -probe, [0.0, -0.0, np.inf, -np.inf]])
    if not np.array_equal(kernels_numpy.hist_index(probe, *tables), hist_index(probe)):
        return None
    return tables


def _levels(x: np.ndarray) -> np.ndarray:
    """The clipped level of positive ``x``: ``float_index`` without the sign and offsets."""
    return float_index(x) - (ZERO_BIN + 2)
