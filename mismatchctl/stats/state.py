"""Layout and merge rule of the partial-aggregate state vector.

One group's state is a float64 vector of ``N_FIELDS`` columns (counts are stored as float64 too;
they are exact up to 2**53). Keeping the state a plain array lets the same merge code combine one
pair of partials or whole tables of them (shape ``(..., N_FIELDS)``) in a handful of numpy calls.

Merge rules: sums and counts add; ``*_MIN``/``*_MAX`` columns take min/max (empty = +inf/-inf);
centred second moments (``*_M2``) and co-moments (``*_C``) add plus Chan et al.'s correction
``delta_x * delta_y * n_a * n_b / n`` where ``delta`` is the difference of the two sides' means.
Means are kept as sums, so they merge by plain addition and the correction is exactly
commutative and vanishes when either side is empty (the empty state is an exact identity).
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class Col(IntEnum):
    """Columns of the state vector. Token columns first, then segment (sequence) columns."""

    TOKENS = 0
    K3_SUM = 1  # sum of rho - 1 - r
    R_SUM = 2
    R_M2 = 3  # centred sum of squares of r
    R_MIN = 4
    R_MAX = 5
    ABS_R_SUM = 6
    CHI2_SUM = 7  # sum of exp(2 clamp(r)) - 1
    RHO_M1_SUM = 8  # sum of rho - 1
    DP_SUM = 9  # sum of |pt - pr|
    DP_MAX = 10
    LOW_PROB = 11  # tokens with pr < LOW_PROB_THRESHOLD
    PR_SUM = 12
    PT_SUM = 13
    PR_M2 = 14
    PT_M2 = 15
    PRPT_C = 16
    PR_MIN = 17
    PR_MAX = 18
    PT_MIN = 19
    PT_MAX = 20
    R_OVERFLOW = 21  # tokens with r > EXP_MAX: exp(r) is beyond float64
    K3_CLAMP_SUM = 22  # sum of K3 of clamp(r, -clamp, clamp) (stats.tails)
    EXTREME = 23  # tokens with |r| > ln(tau)
    IS_OOB = 24  # tokens with exp(r) outside [is_lower, is_upper]
    SEGMENTS = 25
    SEG_K3_MEAN_SUM = 26  # sum over segments of their mean K3
    RLP_SUM = 27  # sum over segments of rollout_log_ppl_i
    TLP_SUM = 28
    RLP_M2 = 29
    TLP_M2 = 30
    RLPTLP_C = 31
    RLP_MIN = 32
    RLP_MAX = 33
    TLP_MIN = 34
    TLP_MAX = 35
    RPPL_SUM = 36  # sum of exp(rollout_log_ppl_i)
    TPPL_SUM = 37
    D_SUM = 38  # sum of trainer_log_ppl_i - rollout_log_ppl_i
    ABS_D_SUM = 39
    PPL_RATIO_SUM = 40  # sum of exp(d_i)
    CHI2_SEQ_SUM = 41  # sum of exp(2 clamp(S_i)) - 1
    RATIO_SEG_SUM = 42  # sum over segments of the token mean of exp(mean r of the turn)


N_FIELDS = len(Col)
LOW_PROB_THRESHOLD = 1e-3
EXP_MAX = float(np.log(np.finfo(np.float64).max))  # 709.78...: exp(r) overflows above it
RATIO_CLAMP = 20.0  # chi2 ratios are formed from clamp(r, -20, 20), as METRICS.md defines

MIN_COLS = np.array([Col.R_MIN, Col.PR_MIN, Col.PT_MIN, Col.RLP_MIN, Col.TLP_MIN])
MAX_COLS = np.array([Col.R_MAX, Col.DP_MAX, Col.PR_MAX, Col.PT_MAX, Col.RLP_MAX, Col.TLP_MAX])

# (count column, sum columns, centred-M2 columns, co-moment column or None)
MomentBlock = tuple[Col, tuple[Col, ...], tuple[Col, ...], Col | None]
BLOCKS: tuple[MomentBlock, ...] = (
    (Col.TOKENS, (Col.R_SUM,), (Col.R_M2,), None),
    (Col.TOKENS, (Col.PR_SUM, Col.PT_SUM), (Col.PR_M2, Col.PT_M2), Col.PRPT_C),
    (Col.SEGMENTS, (Col.RLP_SUM, Col.TLP_SUM), (Col.RLP_M2, Col.TLP_M2), Col.RLPTLP_C),
)


def empty_state(rows: int | None = None) -> np.ndarray:
    """The identity of ``merge_states``: zero sums, +inf minima, -inf maxima."""
    shape = (N_FIELDS,) if rows is None else (rows, N_FIELDS)
    state = np.zeros(shape, dtype=np.float64)
    state[..., MIN_COLS] = np.inf
    state[..., MAX_COLS] = -np.inf
    return state


def merge_states(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Merge two states (or two equally shaped tables of states) into a new array."""
    with np.errstate(over="ignore", invalid="ignore"):  # inf sums stay inf (see Partial)
        out = a + b
        _merge_into(out, a, b)
    return out


def _merge_into(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    out[..., MIN_COLS] = np.minimum(a[..., MIN_COLS], b[..., MIN_COLS])
    out[..., MAX_COLS] = np.maximum(a[..., MAX_COLS], b[..., MAX_COLS])
    add_correction = _add_chan_correction if out.ndim > 1 else _add_chan_correction_1d
    for block in BLOCKS:
        add_correction(out, a, b, block)


def _add_chan_correction_1d(
    out: np.ndarray, a: np.ndarray, b: np.ndarray, block: MomentBlock
) -> None:
    """``_add_chan_correction`` for one pair of states, in Python floats (merges are frequent)."""
    n_col, sum_cols, m2_cols, c_col = block
    na, nb = float(a[n_col]), float(b[n_col])
    if na == 0 or nb == 0:
        return
    weight = na * nb / (na + nb)
    deltas = [float(b[s]) / nb - float(a[s]) / na for s in sum_cols]
    for m2, delta in zip(m2_cols, deltas, strict=True):
        out[m2] += delta * delta * weight
    if c_col is not None:
        out[c_col] += deltas[0] * deltas[1] * weight


def _add_chan_correction(out: np.ndarray, a: np.ndarray, b: np.ndarray, block: MomentBlock) -> None:
    """Add the between-sides term of the centred moments (Chan, Golub & LeVeque 1979)."""
    n_col, sum_cols, m2_cols, c_col = block
    na, nb = a[..., n_col], b[..., n_col]
    both = (na > 0) & (nb > 0)
    if not np.any(both):
        return
    safe_na = np.where(both, na, 1.0)
    safe_nb = np.where(both, nb, 1.0)
    weight = np.where(both, safe_na * safe_nb / (safe_na + safe_nb), 0.0)
    deltas = [b[..., s] / safe_nb - a[..., s] / safe_na for s in sum_cols]
    for m2, delta in zip(m2_cols, deltas, strict=True):
        out[..., m2] += delta * delta * weight
    if c_col is not None:
        out[..., c_col] += deltas[0] * deltas[1] * weight
