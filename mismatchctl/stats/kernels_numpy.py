"""The compiled kernels of ``stats/kernels.py`` in numpy, bit for bit: for small selections.

Loading numba and its compiled kernels costs a process 0.2-0.7 s before the first token is
touched: more than a report of a few thousand sequences takes in all. These twins take the
same arguments and return the same arrays, with every float computed by the same operations in
the same order, so the choice between them (``stats/kernel_choice.py``) never shows in a number:

- sums are sequential, token after token, as the compiled loops add: ``np.bincount`` with
  weights and ``np.add.at`` add in index order (numpy's pairwise ``sum`` would not);
- every token's ``exp`` of the logprobs and ``expm1`` of their difference come from
  :func:`token_exps`, the compiled one's polynomial (``stats/exp_poly.py``) in numpy, operation
  for operation; the rare ones of the clamped ratios are the C library's, called through
  ``math`` as the compiled code calls them (numpy's vectorised versions may differ in the last
  bit); a result beyond float64 is ``inf``, as there;
- an extreme keeps the earlier value on a tie, as ``min``/``max`` do in the compiled loops
  (only the sign of a zero can tell: :func:`_extreme_at`);
- bins are ``np.searchsorted`` (the count of interior edges ``<= x``, the compiled ``_bin``) and
  the r-histogram's lookup is the same integer arithmetic on the same bits.

The tests check every function against its compiled twin on random slices with the edge cases
(zeros of both signs, ties on bin edges, overflowing ratios) and whole reports with either.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from mismatchctl.stats import exp_poly
from mismatchctl.stats.histogram import N_BINS, ZERO_BIN
from mismatchctl.stats.sample import mix64
from mismatchctl.stats.state import (
    EXP_MAX,
    LOW_PROB_THRESHOLD,
    MAX_COLS,
    MIN_COLS,
    RATIO_CLAMP,
    Col,
)

TOKEN_FIELDS = int(Col.IS_OOB) + 1
_SUM_COLS = (
    Col.TOKENS, Col.K3_SUM, Col.R_SUM, Col.ABS_R_SUM, Col.CHI2_SUM, Col.RHO_M1_SUM, Col.DP_SUM,
    Col.LOW_PROB, Col.PR_SUM, Col.PT_SUM, Col.R_OVERFLOW, Col.K3_CLAMP_SUM, Col.EXTREME,
    Col.IS_OOB,
)  # fmt: skip
_MIN_COLS = tuple(int(c) for c in MIN_COLS if c < TOKEN_FIELDS)
_MAX_COLS = tuple(int(c) for c in MAX_COLS if c < TOKEN_FIELDS)
_NO_OVERFLOW = 709.0  # exp and expm1 of a double up to this are finite
# the centred moments and the co-moment: (column, the sum column of each factor's mean)
_MOMENTS = (
    (Col.R_M2, Col.R_SUM, Col.R_SUM),
    (Col.PR_M2, Col.PR_SUM, Col.PR_SUM),
    (Col.PT_M2, Col.PT_SUM, Col.PT_SUM),
    (Col.PRPT_C, Col.PR_SUM, Col.PT_SUM),
)


def _libm(f: Callable[[float], float], x: np.ndarray) -> np.ndarray:
    """``f`` (``math.exp``/``math.expm1``: the C library's) of every value; ``inf`` where the
    result overflows (``math`` raises there; the compiled code returns ``inf``)."""
    big = x > _NO_OVERFLOW
    if not big.any():
        return np.fromiter(map(f, x.tolist()), np.float64, len(x))
    out = np.empty(len(x), np.float64)
    out[~big] = np.fromiter(map(f, x[~big].tolist()), np.float64, int((~big).sum()))
    out[big] = [_or_inf(f, v) for v in x[big].tolist()]
    return out


def _or_inf(f: Callable[[float], float], v: float) -> float:
    try:
        return f(v)
    except OverflowError:
        return math.inf


def _sums(idx: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Per index, the sum of its values added in order from 0.0 (``np.bincount``'s loop)."""
    return np.bincount(idx, weights=values, minlength=size).astype(np.float64, copy=False)


def _extreme_at(out: np.ndarray, idx: np.ndarray, vals: np.ndarray, smaller: bool) -> None:
    """``out[g] = min(out[g], v)`` (``max`` unless ``smaller``) for ``g, v`` in order, keeping
    the earlier value on a tie as the compiled ``min``/``max`` do: the value by numpy, the sign
    of a zero result from the first zero met (``out``'s own value first)."""
    before = out.copy()
    (np.minimum if smaller else np.maximum).at(out, idx, vals)
    zero = out == 0.0
    if not zero.any():
        return
    keep = zero & (before == 0.0)
    hit = (vals == 0.0) & zero[idx] & ~keep[idx]
    groups, first = np.unique(idx[hit], return_index=True)
    out[groups] = vals[hit][first]
    out[keep] = before[keep]


def token_exps(lr: np.ndarray, lt: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The compiled ``token_exps``: ``exp(lr)``, ``exp(lt)``, ``expm1(lt - lr)``."""
    return exp_poly.exp(lr), exp_poly.exp(lt), exp_poly.expm1(lt - lr)


def exps(x: np.ndarray) -> np.ndarray:
    """The compiled ``exps``: ``exp`` of every value."""
    return exp_poly.exp(x)


def expm1s(x: np.ndarray) -> np.ndarray:
    """The compiled ``expm1s``: ``expm1`` of every value."""
    return exp_poly.expm1(x)


def run_starts(seq: np.ndarray, turn: np.ndarray) -> np.ndarray:
    """Where each turn run (equal sequence and turn) starts."""
    if len(seq) == 0:
        return np.zeros(0, np.int64)
    new = np.ones(len(seq), dtype=bool)
    new[1:] = (seq[1:] != seq[:-1]) | (turn[1:] != turn[:-1])
    return np.flatnonzero(new).astype(np.int64)


def hist_index(
    r: np.ndarray, bounds: np.ndarray, table: np.ndarray, e_lo: int, shift: int
) -> np.ndarray:
    """The compiled ``hist_index``: the r-histogram bin of every (finite) value from the
    bins' bounds (``hist_lookup.IndexTables``), the same integer arithmetic on the same bits."""
    x = np.ascontiguousarray(r, dtype=np.float64)
    s = x.view(np.int64)
    b = s & np.int64(0x7FFFFFFFFFFFFFFF)
    first = np.int64(e_lo) << np.int64(shift)
    bucket = np.clip((b >> np.int64(52 - shift)) - first, 0, len(table) - 1)
    k = table[bucket].astype(np.int64) + 2
    k += (np.abs(x) >= bounds[k]).astype(np.int64)
    k *= (b != 0).astype(np.int64)
    return ZERO_BIN + (k - 2 * k * (s < 0).astype(np.int64))


def histogram_counts(
    bucket: np.ndarray, tok_cell: np.ndarray, cell_group: np.ndarray, n_groups: int
) -> np.ndarray:
    """Counts per (group, histogram bin) of tokens whose cell belongs to ``cell_group``."""
    flat = cell_group[tok_cell].astype(np.int64) * N_BINS + bucket
    return np.bincount(flat, minlength=n_groups * N_BINS).astype(np.int64).reshape(-1, N_BINS)


def merge_token_rows(s: np.ndarray, code: np.ndarray, t: np.ndarray) -> None:
    """The compiled ``merge_token_rows``: the token columns of the rows of ``s`` merged into
    the rows ``code`` of ``t`` in row order (sums add, extremes take min/max, centred moments by
    the parallel formula)."""
    code = np.asarray(code, dtype=np.int64)
    for col in _SUM_COLS:
        column = t[:, col]
        np.add.at(column, code, s[:, col])
    for col in _MIN_COLS:
        column = t[:, col]
        _extreme_at(column, code, s[:, col].copy(), smaller=True)
    for col in _MAX_COLS:
        column = t[:, col]
        _extreme_at(column, code, s[:, col].copy(), smaller=False)
    n = s[:, Col.TOKENS]
    rows = n != 0
    g, n = code[rows], n[rows]
    ng = t[g, Col.TOKENS]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        delta = {c: s[rows, c] / n - t[g, c] / ng for c in (Col.R_SUM, Col.PR_SUM, Col.PT_SUM)}
        for m2, a, b in _MOMENTS:
            column = t[:, m2]
            np.add.at(column, g, s[rows, m2] + n * delta[a] * delta[b])


def cell_sums(
    lr: np.ndarray,
    lt: np.ndarray,
    pr_in: np.ndarray,
    pt_in: np.ndarray,
    rm1_in: np.ndarray,
    starts: np.ndarray,
    inner: np.ndarray,
    position: np.ndarray,
    kv_base: np.ndarray,
    kv_inner: np.ndarray,
    tp_inner: np.ndarray,
    extra: np.ndarray,
    n_extra: int,
    tails: np.ndarray,
    bounds: np.ndarray,
    table: np.ndarray,
    e_lo: int,
    shift: int,
) -> tuple[np.ndarray, ...]:
    """The compiled ``cell_sums`` (arguments and results as there): cells of (turn run,
    token code) of one slice, each run's logprob sums, and per token ``r``, its cell and its
    r-histogram bin."""
    n = len(lr)
    m = len(starts)
    clamp, log_tau, log_lo, log_hi = (float(v) for v in tails[:4])
    run = np.repeat(np.arange(m, dtype=np.int64), np.diff(starts, append=n))
    n_kv = len(kv_inner) + 1
    n_tp = len(tp_inner) + 1
    n_x = n_extra if len(extra) else 1
    n_codes = (len(inner) + 1) * n_kv * n_tp * n_x
    code = np.searchsorted(inner, pr_in, side="right").astype(np.int64)
    if len(kv_inner):
        kv = (kv_base[run] + position).astype(np.float64)
        code = code * n_kv + np.searchsorted(kv_inner, kv, side="right")
    if len(tp_inner):
        tp = (np.arange(n, dtype=np.int64) - starts[run]).astype(np.float64)
        code = code * n_tp + np.searchsorted(tp_inner, tp, side="right")
    if len(extra):
        code = code * n_x + extra
    key = run * n_codes + code
    cells, tok_cell = np.unique(key, return_inverse=True)
    tok_cell = tok_cell.astype(np.int64).reshape(-1)
    c = len(cells)

    with np.errstate(over="ignore", invalid="ignore"):
        pt = pt_in
        r = lt - lr
        rm1 = rm1_in
        ar = np.abs(r)
        chi2 = (rm1 + 2.0) * rm1
        wide = ar > RATIO_CLAMP
        chi2[wide] = _libm(math.expm1, 2.0 * np.minimum(np.maximum(r[wide], -RATIO_CLAMP),
                                                        RATIO_CLAMP))  # fmt: skip
        dp = np.abs(pt - pr_in)
        k3 = rm1 - r
        k3c = k3.copy()
        beyond = ar > clamp
        c_r = np.minimum(np.maximum(r[beyond], -clamp), clamp)
        k3c[beyond] = _libm(math.expm1, c_r) - c_r
    columns = {
        Col.TOKENS: np.ones(n),
        Col.K3_SUM: k3,
        Col.R_SUM: r,
        Col.ABS_R_SUM: ar,
        Col.CHI2_SUM: chi2,
        Col.RHO_M1_SUM: rm1,
        Col.DP_SUM: dp,
        Col.LOW_PROB: (pr_in < LOW_PROB_THRESHOLD).astype(np.float64),
        Col.R_OVERFLOW: (r > EXP_MAX).astype(np.float64),
        Col.K3_CLAMP_SUM: k3c,
        Col.EXTREME: (ar > log_tau).astype(np.float64),
        Col.IS_OOB: ((r < log_lo) | (r > log_hi)).astype(np.float64),
        Col.PR_SUM: pr_in,
        Col.PT_SUM: pt,
    }
    state = np.zeros((c, TOKEN_FIELDS), np.float64)
    for col, values in columns.items():
        state[:, col] = _sums(tok_cell, values, c)
    for col, values, smaller in (
        (Col.R_MIN, r, True), (Col.R_MAX, r, False), (Col.DP_MAX, dp, False),
        (Col.PR_MIN, pr_in, True), (Col.PR_MAX, pr_in, False),
        (Col.PT_MIN, pt, True), (Col.PT_MAX, pt, False),
    ):  # fmt: skip
        out = np.full(c, np.inf if smaller else -np.inf)
        _extreme_at(out, tok_cell, values, smaller)
        state[:, col] = out
    cnt = state[tok_cell, Col.TOKENS]
    dr = r - state[tok_cell, Col.R_SUM] / cnt
    dx = pr_in - state[tok_cell, Col.PR_SUM] / cnt
    dy = pt - state[tok_cell, Col.PT_SUM] / cnt
    for col, values in ((Col.R_M2, dr * dr), (Col.PR_M2, dx * dx), (Col.PT_M2, dy * dy),
                        (Col.PRPT_C, dx * dy)):  # fmt: skip
        state[:, col] = _sums(tok_cell, values, c)
    bucket = hist_index(r, bounds, table, e_lo, shift) if len(table) else np.zeros(0, np.int64)
    return (
        cells // n_codes,
        cells % n_codes,
        np.bincount(tok_cell, minlength=c).astype(np.int64),
        state,
        _sums(run, lr, m),
        _sums(run, lt, m),
        r,
        tok_cell.astype(np.int32),
        bucket,
    )


def resample_sums(values: np.ndarray, picks: np.ndarray) -> np.ndarray:
    """The compiled ``resample_sums``: per resample (a row of ``picks``), the column sums of
    the picked rows of ``values``, added in pick order."""
    k, n = picks.shape
    row = np.repeat(np.arange(k, dtype=np.int64), n)
    flat = picks.reshape(-1)
    out = np.empty((k, values.shape[1]), np.float64)
    for c in range(values.shape[1]):
        out[:, c] = _sums(row, values[flat, c], k)
    return out


_L0 = np.uint64(0x9E3779B97F4A7C15)  # seqhash's lanes
_L1 = np.uint64(0xD6E8FEB86659FD93)
_L2 = np.uint64(0xA0761D6478BD642F)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser of a fresh uint64 array, in place (``seqhash._mix``)."""
    return mix64(x, in_place=True)


def sequence_hashes(
    ids: np.ndarray,
    missing: np.ndarray,
    position: np.ndarray,
    rollout_bits: np.ndarray,
    starts: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The compiled ``seqhash.sequence_hashes``: per sequence ``(h1, h2, hr)`` (sums mod 2**64,
    the same in any order) and whether none of its tokens is ``missing`` an id."""
    m = len(starts)
    if m == 0:
        return np.zeros((0, 3), np.uint64), np.ones(0, np.bool_)
    place = position.astype(np.uint64) * _L2
    v = _mix(_mix(ids + _L0) ^ place)
    out = np.empty((m, 3), np.uint64)
    out[:, 0] = np.add.reduceat(v, starts)
    out[:, 1] = np.add.reduceat(_mix(v ^ _L1), starts)
    out[:, 2] = np.add.reduceat(_mix(_mix(rollout_bits + _L1) ^ place), starts)
    return out, ~np.logical_or.reduceat(missing, starts)
