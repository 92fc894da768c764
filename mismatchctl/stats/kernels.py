"""Compiled per-token loops (numba): the one place where every token of a report is touched.

:func:`cell_sums` walks a slice of model tokens once per turn run (the contiguous tokens of one
sequence in one turn) and reduces it to (turn run x token code) cells, a token code being its
probability bin combined with its KV-position and turn-position bins when they are asked for:
counts, sums, centred second moments (a second pass over the run's tokens around each cell's
mean, which also gives each token its cell and its r-histogram bin) and extremes of every
token column of the state (``Col.TOKENS`` .. ``Col.IS_OOB``), plus each run's sums of both
logprobs. Everything a report, a comparison or a figure derives from tokens merges
from these cells (see ``stats/turnruns.py``). The arithmetic is the numpy kernel's
(``stats/chunk.py``), token by token; the tests check the two agree.

Compiled on first use and cached next to this file (or in ``NUMBA_CACHE_DIR``); ``nogil`` lets
the engine's worker threads run it in parallel.
"""

from __future__ import annotations

import math

import numpy as np

from mismatchctl.stats import exp_poly
from mismatchctl.stats.bins import FEW_EDGES
from mismatchctl.stats.histogram import N_BINS, ZERO_BIN
from mismatchctl.stats.numba_load import kernel
from mismatchctl.stats.state import (
    EXP_MAX,
    LOW_PROB_THRESHOLD,
    MAX_COLS,
    MIN_COLS,
    RATIO_CLAMP,
    Col,
)

TOKEN_FIELDS = int(Col.IS_OOB) + 1  # the token columns come first in the state vector
# numba freezes module-level ints at compile time: plain ints, not enum members
_N, _K3, _R, _R_M2, _R_MIN, _R_MAX = (
    int(c) for c in (Col.TOKENS, Col.K3_SUM, Col.R_SUM, Col.R_M2, Col.R_MIN, Col.R_MAX)
)
_ABS_R, _CHI2, _RHO_M1, _DP, _DP_MAX, _LOW = (
    int(c)
    for c in (Col.ABS_R_SUM, Col.CHI2_SUM, Col.RHO_M1_SUM, Col.DP_SUM, Col.DP_MAX, Col.LOW_PROB)
)
_PR, _PT, _PR_M2, _PT_M2, _PRPT_C = (
    int(c) for c in (Col.PR_SUM, Col.PT_SUM, Col.PR_M2, Col.PT_M2, Col.PRPT_C)
)
_PR_MIN, _PR_MAX, _PT_MIN, _PT_MAX = (
    int(c) for c in (Col.PR_MIN, Col.PR_MAX, Col.PT_MIN, Col.PT_MAX)
)
_OVF = int(Col.R_OVERFLOW)
_K3C, _EXT, _OOB = (int(c) for c in (Col.K3_CLAMP_SUM, Col.EXTREME, Col.IS_OOB))
_SUM_COLS = (_N, _K3, _R, _ABS_R, _CHI2, _RHO_M1, _DP, _LOW, _PR, _PT, _OVF, _K3C, _EXT, _OOB)
_EXP_MAX = float(EXP_MAX)
_MIN_COLS = tuple(int(c) for c in MIN_COLS if c < TOKEN_FIELDS)  # the token columns' extremes
_MAX_COLS = tuple(int(c) for c in MAX_COLS if c < TOKEN_FIELDS)
_LOW_PROB = float(LOW_PROB_THRESHOLD)
_CLAMP = float(RATIO_CLAMP)


@kernel(nogil=True, error_model="numpy")
def run_starts(seq: np.ndarray, turn: np.ndarray) -> np.ndarray:
    """Where each turn run (equal sequence and turn) starts."""
    n = seq.shape[0]
    m = 0
    for i in range(n):
        if i == 0 or seq[i] != seq[i - 1] or turn[i] != turn[i - 1]:
            m += 1
    starts = np.empty(m, np.int64)
    j = 0
    for i in range(n):
        if i == 0 or seq[i] != seq[i - 1] or turn[i] != turn[i - 1]:
            starts[j] = i
            j += 1
    return starts


@kernel(nogil=True, error_model="numpy", inline="always")
def _bin(p: float, inner: np.ndarray) -> int:
    """Count of interior edges ``<= p``: the bin of ``stats.bins.assign_bins``."""
    hi = inner.shape[0]
    if hi <= FEW_EDGES:  # branch-free comparisons: no mispredicted jumps on random data
        b = 0
        for j in range(hi):
            b += p >= inner[j]
        return b
    lo = 0
    while lo < hi:  # binary search for the first edge > p
        mid = (lo + hi) >> 1
        if inner[mid] <= p:
            lo = mid + 1
        else:
            hi = mid
    return lo


@kernel(nogil=True, error_model="numpy", inline="always")
def _bounds(b: int, inner: np.ndarray) -> tuple[float, float]:
    """``[lo, hi)`` of bin ``b`` of the interior edges ``inner`` (the outer bins are open)."""
    lo = -np.inf if b == 0 else inner[b - 1]
    hi = np.inf if b == inner.shape[0] else inner[b]
    return lo, hi


@kernel(nogil=True, error_model="numpy")
def _reset_rows(acc: np.ndarray, rows: np.ndarray, count: int) -> None:
    """Rows ``rows[:count]`` of ``acc`` back to the empty state (zero sums, +-inf extremes)."""
    for j in range(count):
        row = acc[rows[j]]
        row[:] = 0.0
        for col in _MIN_COLS:
            row[col] = np.inf
        for col in _MAX_COLS:
            row[col] = -np.inf


@kernel(nogil=True, error_model="numpy")
def _sort_small(a: np.ndarray, count: int) -> None:
    """Insertion sort of ``a[:count]`` (the few token codes one turn run visits)."""
    for i in range(1, count):
        v = a[i]
        j = i - 1
        while j >= 0 and a[j] > v:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = v


@kernel(nogil=True, error_model="numpy", inline="always")
def _hist_bin(x: float, bounds: np.ndarray, table: np.ndarray, first: int, shift: int) -> int:
    """The r-histogram bin of finite ``x`` from the bins' bounds (``hist_lookup.IndexTables``,
    ``first = e_lo << shift``): the bucket of its exponent and top mantissa bits, one comparison
    with the next bound, the sign; no logarithm, no branch."""
    s = np.int64(np.float64(x).view(np.int64))
    b = s & 0x7FFFFFFFFFFFFFFF
    bucket = min(max((b >> (52 - shift)) - first, 0), table.shape[0] - 1)
    k = np.int64(table[bucket]) + 2  # the bucket's level, offset as the bins are
    k += np.int64(abs(x) >= bounds[k])  # bounds[k] is the next level's bound
    k *= np.int64(b != 0)  # 0 and -0 go to the zero bin
    return ZERO_BIN + (k - 2 * k * np.int64(s < 0))


_LOG2E, _SHIFTER, _SHIFTER_BITS = exp_poly.LOG2E, exp_poly.SHIFTER, exp_poly.SHIFTER_BITS
_LN2_HI, _LN2_LO = exp_poly.LN2_HI, exp_poly.LN2_LO
_FAST_LO, _FAST_HI = exp_poly.FAST_LO, exp_poly.FAST_HI
_H0, _H1, _H2, _H3, _H4, _H5, _H6, _H7, _H8, _H9, _H10, _H11, _H12 = exp_poly.H


@kernel(nogil=True, error_model="numpy", inline="always")
def _exp_parts(x: float) -> tuple[float, float]:
    """``expm1(r)`` and ``2**n`` of ``x = n ln2 + r`` (``stats/exp_poly.py``: the method, and
    its numpy twin, operation for operation); straight-line, so that loops of it vectorise."""
    xc = min(max(x, _FAST_LO), _FAST_HI)
    t = xc * _LOG2E + _SHIFTER
    n = t - _SHIFTER
    r = (xc - n * _LN2_HI) - n * _LN2_LO
    r2 = r * r  # Estrin's scheme: a dependency chain of 8 operations, not Horner's 26
    r4 = r2 * r2
    h = ((_H0 + _H1 * r) + (_H2 + _H3 * r) * r2) + ((_H4 + _H5 * r) + (_H6 + _H7 * r) * r2) * r4
    h += (((_H8 + _H9 * r) + (_H10 + _H11 * r) * r2) + _H12 * r4) * (r4 * r4)
    bits = (np.int64(np.float64(t).view(np.int64)) - _SHIFTER_BITS + 1023) << 52
    return r + r2 * h, np.int64(bits).view(np.float64)


@kernel(nogil=True, error_model="numpy", inline="always")
def _far(x: float) -> int:
    """1 where the C library's function is used (outside the fast range, NaN), else 0."""
    return np.int64(x < _FAST_LO) | np.int64(x > _FAST_HI) | np.int64(x != x)


@kernel(nogil=True, error_model="numpy")
def token_exps(lr: np.ndarray, lt: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``exp(lr)``, ``exp(lt)`` and ``expm1(lt - lr)`` of a slice's tokens in one vectorised
    pass (``stats/exp_poly.py``; its twin ``kernels_numpy.token_exps``), the C library's
    functions where a value is outside the fast range."""
    n = lr.shape[0]
    pr = np.empty(n, np.float64)
    pt = np.empty(n, np.float64)
    rm1 = np.empty(n, np.float64)
    far = 0
    for i in range(n):
        a = lr[i]
        b = lt[i]
        d = b - a
        em, s = _exp_parts(a)
        pr[i] = s * (1.0 + em)
        em, s = _exp_parts(b)
        pt[i] = s * (1.0 + em)
        em, s = _exp_parts(d)
        rm1[i] = s * em + (s - 1.0)
        far += _far(a) | _far(b) | _far(d)
    if far:
        for i in range(n):
            a = lr[i]
            b = lt[i]
            d = b - a
            if _far(a):
                pr[i] = math.exp(a)
            if _far(b):
                pt[i] = math.exp(b)
            if _far(d):
                rm1[i] = math.expm1(d)
    return pr, pt, rm1


@kernel(nogil=True, error_model="numpy")
def expm1s(x: np.ndarray) -> np.ndarray:
    """``expm1`` of every value (``token_exps``' method), e.g. each token's ``rho - 1``."""
    n = x.shape[0]
    out = np.empty(n, np.float64)
    far = 0
    for i in range(n):
        em, s = _exp_parts(x[i])
        out[i] = s * em + (s - 1.0)
        far += _far(x[i])
    if far:
        for i in range(n):
            if _far(x[i]):
                out[i] = math.expm1(x[i])
    return out


@kernel(nogil=True, error_model="numpy")
def exps(x: np.ndarray) -> np.ndarray:
    """``exp`` of every value (``token_exps``' method), e.g. the probabilities a bin key bins."""
    n = x.shape[0]
    out = np.empty(n, np.float64)
    far = 0
    for i in range(n):
        em, s = _exp_parts(x[i])
        out[i] = s * (1.0 + em)
        far += _far(x[i])
    if far:
        for i in range(n):
            if _far(x[i]):
                out[i] = math.exp(x[i])
    return out


@kernel(nogil=True, error_model="numpy")
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
    """Cells of (turn run, token code) of one slice.

    ``lr``/``lt``: float64 logprobs (finite); ``pr_in``, ``pt_in``, ``rm1_in``: ``exp(lr)``,
    ``exp(lt)`` and ``expm1(lt - lr)`` from :func:`token_exps` (one vectorised pass over the
    slice: the C library's, called per token, were half the loop's cycles; the bin keys take
    ``exp(lr)`` from the same polynomial, so that a token on a bin edge lands where
    ``assign_bins`` puts it in every view); ``starts``: the runs;
    ``inner``: the interior bin edges of the inference probability, ascending. A token's code
    combines its probability bin ``b`` with, when their edges are given (non-empty), its KV
    position bin ``kv`` (``kv_base[run] + position[token]``, binned by ``kv_inner``: the edges
    after the first) and its turn-position bin ``tp`` (its index in the run, binned by
    ``tp_inner``): ``(b * n_kv + kv) * n_tp + tp``, and, when ``extra`` is given (non-empty:
    one code ``0..n_extra-1`` per token, computed by the caller: the entropy and trainer
    probability bins), ``((b * n_kv + kv) * n_tp + tp) * n_extra + extra``. ``tails``: the clamp of the clamped K3,
    ``ln(tau)`` of the extreme fraction and the log bounds of the IS band (``stats.tails``).
    ``bounds, table, e_lo, shift``: the r-histogram's lookup (``hist_lookup.IndexTables``), or an
    empty ``table`` for no histogram bins.
    Returns ``cell_run, cell_code, cell_len, cell_state`` (cells ordered by run, then code;
    state: the ``TOKEN_FIELDS`` token columns), ``lr_sum, lt_sum`` per run, and per token
    ``r``, its cell (``tok_cell``) and its r-histogram bin (``bucket``; empty without a lookup).
    """
    n = lr.shape[0]
    m = starts.shape[0]
    clamp, log_tau, log_lo, log_hi = tails[0], tails[1], tails[2], tails[3]
    use_kv = kv_inner.shape[0] > 0
    use_tp = tp_inner.shape[0] > 0
    n_kv = kv_inner.shape[0] + 1
    n_tp = tp_inner.shape[0] + 1
    use_x = extra.shape[0] > 0
    n_x = n_extra if use_x else 1
    n_codes = (inner.shape[0] + 1) * n_kv * n_tp * n_x
    cap = min(n, m * n_codes)
    cell_run = np.empty(cap, np.int64)
    cell_code = np.empty(cap, np.int64)
    cell_len = np.empty(cap, np.int64)
    state = np.empty((cap, TOKEN_FIELDS), np.float64)
    lr_sum = np.zeros(m, np.float64)
    lt_sum = np.zeros(m, np.float64)
    r_out = np.empty(n, np.float64)
    with_hist = table.shape[0] > 0
    bucket = np.empty(n if with_hist else 0, np.int64)
    first = e_lo << shift
    tok_code = np.empty(n, np.int32)
    tok_cell = np.empty(n, np.int32)
    acc = np.empty((n_codes, TOKEN_FIELDS), np.float64)
    every = np.arange(n_codes)
    _reset_rows(acc, every, n_codes)
    touched = np.empty(n_codes, np.int64)
    cell_of_code = np.empty(n_codes, np.int64)
    c = 0
    for k in range(m):
        s = starts[k]
        e = starts[k + 1] if k + 1 < m else n
        a_sum = 0.0
        t_sum = 0.0
        count = np.int64(0)  # not the literal 0: one compiled signature of the helpers
        kv_b = 0
        kv_lo = np.inf  # the cached KV bin [kv_lo, kv_hi): positions rise, it rarely changes
        kv_hi = -np.inf
        tp_b = 0
        tp_lo = np.inf
        tp_hi = -np.inf
        base = kv_base[k] if use_kv else 0
        for i in range(s, e):
            a = lr[i]
            t = lt[i]
            a_sum += a
            t_sum += t
            pr = pr_in[i]
            pt = pt_in[i]
            r = t - a
            rm1 = rm1_in[i]
            ar = abs(r)
            if ar > _CLAMP:
                chi2 = math.expm1(2.0 * min(max(r, -_CLAMP), _CLAMP))
            else:
                chi2 = (rm1 + 2.0) * rm1
            dp = abs(pt - pr)
            code = _bin(pr, inner)
            if use_kv:
                kv = float(base + position[i])
                if not (kv_lo <= kv < kv_hi):
                    kv_b = _bin(kv, kv_inner)
                    kv_lo, kv_hi = _bounds(kv_b, kv_inner)
                code = code * n_kv + kv_b
            if use_tp:
                tp = float(i - s)
                if not (tp_lo <= tp < tp_hi):
                    tp_b = _bin(tp, tp_inner)
                    tp_lo, tp_hi = _bounds(tp_b, tp_inner)
                code = code * n_tp + tp_b
            if use_x:
                code = code * n_x + extra[i]
            r_out[i] = r
            tok_code[i] = code
            row = acc[code]
            if row[_N] == 0.0:
                touched[count] = code
                count += 1
            row[_N] += 1.0
            k3 = rm1 - r
            row[_K3] += k3
            row[_R] += r
            row[_ABS_R] += ar
            row[_CHI2] += chi2
            row[_RHO_M1] += rm1
            row[_DP] += dp
            if pr < _LOW_PROB:
                row[_LOW] += 1.0
            if r > _EXP_MAX:
                row[_OVF] += 1.0
            if ar > clamp:  # rare: the clamped K3 is K3 elsewhere
                c_r = min(max(r, -clamp), clamp)
                row[_K3C] += math.expm1(c_r) - c_r
            else:
                row[_K3C] += k3
            if ar > log_tau:
                row[_EXT] += 1.0
            if r < log_lo or r > log_hi:
                row[_OOB] += 1.0
            row[_PR] += pr
            row[_PT] += pt
            row[_R_MIN] = min(row[_R_MIN], r)
            row[_R_MAX] = max(row[_R_MAX], r)
            row[_DP_MAX] = max(row[_DP_MAX], dp)
            row[_PR_MIN] = min(row[_PR_MIN], pr)
            row[_PR_MAX] = max(row[_PR_MAX], pr)
            row[_PT_MIN] = min(row[_PT_MIN], pt)
            row[_PT_MAX] = max(row[_PT_MAX], pt)
        lr_sum[k] = a_sum
        lt_sum[k] = t_sum
        _sort_small(touched, count)
        for j in range(count):
            cell_of_code[touched[j]] = c + j
        for i in range(s, e):  # centred moments around each cell's mean; cells; bins
            code = tok_code[i]
            tok_cell[i] = cell_of_code[code]
            row = acc[code]
            cnt = row[_N]
            r = r_out[i]
            dr = r - row[_R] / cnt
            dx = pr_in[i] - row[_PR] / cnt
            dy = pt_in[i] - row[_PT] / cnt
            row[_R_M2] += dr * dr
            row[_PR_M2] += dx * dx
            row[_PT_M2] += dy * dy
            row[_PRPT_C] += dx * dy
            if with_hist:
                bucket[i] = _hist_bin(r, bounds, table, first, shift)
        for j in range(count):
            code = touched[j]
            state[c] = acc[code]
            cell_run[c] = k
            cell_code[c] = code
            cell_len[c] = int(acc[code, _N])
            c += 1
        _reset_rows(acc, touched, count)
    return (
        cell_run[:c],
        cell_code[:c],
        cell_len[:c],
        state[:c],
        lr_sum,
        lt_sum,
        r_out,
        tok_cell,
        bucket,
    )


@kernel(nogil=True, error_model="numpy", boundscheck=False)
def hist_index(
    r: np.ndarray, bounds: np.ndarray, table: np.ndarray, e_lo: int, shift: int
) -> np.ndarray:
    """``histogram.hist_index`` of every value of ``r`` (finite) from the bins' bounds
    (``hist_lookup.IndexTables``): see :func:`_hist_bin`."""
    n = r.shape[0]
    out = np.empty(n, np.int64)
    first = e_lo << shift
    for i in range(n):
        out[i] = _hist_bin(r[i], bounds, table, first, shift)
    return out


@kernel(nogil=True, error_model="numpy")
def histogram_counts(
    bucket: np.ndarray, tok_cell: np.ndarray, cell_group: np.ndarray, n_groups: int
) -> np.ndarray:
    """Counts per (group, histogram bin) of tokens whose cell belongs to ``cell_group``."""
    out = np.zeros((n_groups, N_BINS), np.int64)
    for i in range(bucket.shape[0]):
        out[cell_group[tok_cell[i]], bucket[i]] += 1
    return out


@kernel(nogil=True, error_model="numpy")
def merge_token_rows(s: np.ndarray, code: np.ndarray, t: np.ndarray) -> None:
    """Merge the token columns of the rows of state table ``s`` into the rows ``code`` of ``t``
    (an empty state table): sums add, extremes take min/max, centred moments by the parallel
    formula ``M2 = sum of (M2_row + n_row (mean_row - mean)^2)`` (co-moment alike)."""
    m = s.shape[0]
    for i in range(m):
        g = code[i]
        for col in _SUM_COLS:
            t[g, col] += s[i, col]
        for col in _MIN_COLS:
            t[g, col] = min(t[g, col], s[i, col])
        for col in _MAX_COLS:
            t[g, col] = max(t[g, col], s[i, col])
    for i in range(m):
        g = code[i]
        n = s[i, _N]
        if n == 0:
            continue
        ng = t[g, _N]
        dr = s[i, _R] / n - t[g, _R] / ng
        dx = s[i, _PR] / n - t[g, _PR] / ng
        dy = s[i, _PT] / n - t[g, _PT] / ng
        t[g, _R_M2] += s[i, _R_M2] + n * dr * dr
        t[g, _PR_M2] += s[i, _PR_M2] + n * dx * dx
        t[g, _PT_M2] += s[i, _PT_M2] + n * dy * dy
        t[g, _PRPT_C] += s[i, _PRPT_C] + n * dx * dy


@kernel(nogil=True)
def resample_sums(values: np.ndarray, picks: np.ndarray) -> np.ndarray:
    """Per resample (a row of ``picks``: indices drawn with replacement), the column sums of
    the picked rows of ``values``: ``out[k] = values[picks[k]].sum(axis=0)``, without
    materialising the gathered rows."""
    k, n = picks.shape
    m = values.shape[1]
    out = np.zeros((k, m), np.float64)
    for j in range(k):
        row = out[j]
        for i in range(n):
            v = values[picks[j, i]]
            for c in range(m):
                row[c] += v[c]
    return out
