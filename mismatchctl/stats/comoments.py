"""Mergeable co-moments of pairs of variables: correlation, regression slope, and the pairs that
reveal an off-by-one shift between the two logprob sides.

A pair state is ``[n, sum x, sum y, M2 x, M2 y, C xy]`` (centred sums of squares and of cross
products), merged with Chan et al.'s rule, so it can be computed on any parts and combined.

Lags (``lag_states``): within a turn of a sequence (consecutive model tokens, so consecutive
positions) the pairs ``(lr_t, lt_t)`` (``lag0``), ``(lr_t, lt_{t+1})`` (``lag_plus1``: matches
when the trainer's value of token t sits one position later) and ``(lr_{t+1}, lt_t)``
(``lag_minus1``: one position earlier). Aligned sides correlate far better at lag 0 than at lag
+-1; a shifted side correlates best at the lag it was shifted by.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from mismatchctl.stats import per_token

LAG_NAMES = ("lag0", "lag_plus1", "lag_minus1")


class P(IntEnum):
    N = 0
    SX = 1
    SY = 2
    MXX = 3
    MYY = 4
    CXY = 5


def pair_state(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The state of the pairs ``(x[i], y[i])`` (two-pass centring: no cancellation)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    n = len(x)
    if n == 0:
        return np.zeros(len(P))
    dx, dy = x - x.mean(), y - y.mean()
    return np.array([n, x.sum(), y.sum(), dx @ dx, dy @ dy, dx @ dy], dtype=np.float64)


def merge_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Merge states (or stacks of states, elementwise); the zero state is the identity."""
    out = a + b
    na, nb = a[..., P.N], b[..., P.N]
    n = np.where(na + nb > 0, na + nb, 1.0)
    w = na * nb / n
    dx = b[..., P.SX] / np.where(nb > 0, nb, 1.0) - a[..., P.SX] / np.where(na > 0, na, 1.0)
    dy = b[..., P.SY] / np.where(nb > 0, nb, 1.0) - a[..., P.SY] / np.where(na > 0, na, 1.0)
    out[..., P.MXX] = a[..., P.MXX] + b[..., P.MXX] + dx * dx * w
    out[..., P.MYY] = a[..., P.MYY] + b[..., P.MYY] + dy * dy * w
    out[..., P.CXY] = a[..., P.CXY] + b[..., P.CXY] + dx * dy * w
    return out


def correlation(state: np.ndarray) -> float | None:
    """Pearson correlation, or None with fewer than two pairs or a constant variable."""
    mxx, myy = state[P.MXX], state[P.MYY]
    if state[P.N] < 2 or mxx <= 0 or myy <= 0:
        return None
    return float(np.clip(state[P.CXY] / (math.sqrt(mxx) * math.sqrt(myy)), -1.0, 1.0))


def regression(state: np.ndarray) -> dict[str, float | None]:
    """Least squares of y on x: ``slope`` and ``intercept``; and ``diff_r2``, the share of the
    variance of ``y - x`` explained by a line in x (0 when y = x + independent noise)."""
    n, mxx, myy, cxy = state[P.N], state[P.MXX], state[P.MYY], state[P.CXY]
    if n < 2 or mxx <= 0:
        return {"slope": None, "intercept": None, "diff_r2": None}
    slope = cxy / mxx
    intercept = (state[P.SY] - slope * state[P.SX]) / n
    cov_dx = cxy - mxx  # cov(y - x, x), as a sum
    var_d = myy - 2 * cxy + mxx
    r2 = cov_dx * cov_dx / (var_d * mxx) if var_d > 0 else None
    return {"slope": float(slope), "intercept": float(intercept), "diff_r2": _unit(r2)}


def _unit(x: float | None) -> float | None:
    return None if x is None else float(min(1.0, max(0.0, x)))


Pairs = tuple[tuple[np.ndarray, np.ndarray], ...]


@dataclass(frozen=True)
class Shifted:
    """Every neighbouring pair of a slice shifted by a position, unclamped: ``r_plus`` is
    ``lt_{t+1} - lr_t`` and ``r_minus`` is ``lt_t - lr_{t+1}`` (``n - 1`` of each), ``k3_plus``
    and ``k3_minus`` their K3 (``expm1(r) - r``, numpy's), and ``adjacent`` the pairs within a
    turn. Taken once per slice for the lag sums (``lag_k3``: the pairs within a turn) and the
    misaligned turns (``stats/misalign.py``: every pair, clamped where ``|r|`` passes the
    clamp), which each took their own before."""

    r_plus: np.ndarray
    k3_plus: np.ndarray
    r_minus: np.ndarray
    k3_minus: np.ndarray
    adjacent: np.ndarray


def shifted_pairs(lr: np.ndarray, lt: np.ndarray, seq: np.ndarray, turn: np.ndarray) -> Shifted:
    """The neighbouring pairs of a slice (tokens in order): see :class:`Shifted`."""
    lr, lt = np.asarray(lr, np.float64), np.asarray(lt, np.float64)
    r_plus, r_minus = lt[1:] - lr[:-1], lt[:-1] - lr[1:]
    with np.errstate(invalid="ignore"):  # inf - inf where a side overflowed
        k3_plus, k3_minus = per_token.k3(r_plus), per_token.k3(r_minus)
    adjacent = (seq[1:] == seq[:-1]) & (turn[1:] == turn[:-1])
    return Shifted(r_plus, k3_plus, r_minus, k3_minus, adjacent)


def lag_pairs(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    turn: np.ndarray,
    adjacent: np.ndarray | None = None,
) -> Pairs:
    """The (rollout, trainer) pairs at lag 0, +1 and -1 within a turn (``LAG_NAMES`` order);
    ``adjacent``: which neighbouring pairs are within a turn, when the caller has it."""
    lr, lt = np.asarray(lr, np.float64), np.asarray(lt, np.float64)
    if adjacent is None:
        adjacent = (seq[1:] == seq[:-1]) & (turn[1:] == turn[:-1])
    return (lr, lt), (lr[:-1][adjacent], lt[1:][adjacent]), (lr[1:][adjacent], lt[:-1][adjacent])


def lag_k3(
    pairs: Pairs, k3: np.ndarray | None = None, shifted: Shifted | None = None
) -> np.ndarray:
    """Pairs and K3 sums of shape ``(3, 2)`` in ``LAG_NAMES`` order: the mean K3 the two sides
    would have if the trainer side were shifted by 0, +1 or -1 positions within a turn
    (``exp(r) - 1 - r`` with ``r = y - x``; mergeable by addition). ``k3``: the lag-0 pairs'
    K3 when the caller has it; ``shifted``: the slice's shifted pairs (``shifted_pairs``), whose
    K3 within a turn are the shifted lags' (the same values, in the same order)."""
    out = np.zeros((3, 2))
    with np.errstate(over="ignore", invalid="ignore"):
        for i, (x, y) in enumerate(pairs):
            if i == 0 and k3 is not None:
                out[i] = (len(k3), float(np.sum(k3)))
                continue
            if i > 0 and shifted is not None:
                k = (shifted.k3_plus if i == 1 else shifted.k3_minus)[shifted.adjacent]
                out[i] = (len(k), float(np.sum(k)))
                continue
            r = y - x
            out[i] = (len(r), float(np.sum(per_token.k3(r))))
    return out


def lag_states(pairs: Pairs) -> np.ndarray:
    """Pair states of shape ``(3, 6)`` in ``LAG_NAMES`` order (x = rollout, y = trainer)."""
    return np.stack([pair_state(x, y) for x, y in pairs])
