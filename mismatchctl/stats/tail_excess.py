"""The K3 above the healthy noise's positive tail, against a baseline's: the tokens with ``r``
above ``TAIL_RATIO`` of their ``|lr|`` (``stats/hot_sequences.py``) and the K3 they carry, per
(turn kind, probability bin) cell of each sequence, the run's over the baseline's at the run's
own cells.

A truncation renormalised on the rollout side (top-p, top-k, min-p) lowers ``r`` on every kept
token by its context's log kept mass, so it moves no token above that tail: it carries less K3
there than the healthy noise does. What does carry K3 there is another cause that moves ``r``
both ways (other weights, a precision loss): the statistic ``diagnose`` reads beside a
truncation (``analysis/diagnose/causes/peel.py``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mismatchctl.stats.hot_sequences import HotSequenceState

N_ALL, K3_ABOVE = 0, 7  # the state's columns: every token, the K3 above the tail
Z95 = 1.959963984540054


@dataclass(frozen=True)
class TailExcess:
    """The run's K3 above the tail over what the baseline's per-cell rates give its tokens
    (``ratio``, with a 95% interval from the two sides' sequence-clustered variances), the
    two rates per token (the baseline's at the run's mix of cells) and the tokens compared."""

    ratio: float
    ci: tuple[float, float]
    rate: float
    baseline_rate: float
    tokens: int


def tail_excess(state: HotSequenceState, base: HotSequenceState) -> TailExcess | None:
    """The run's (``state``) tail K3 over the baseline's (``base``) at the run's cells; the cells
    the baseline holds no token of are left out of both. None when the baseline carries no K3
    above the tail, or no sequence of the run shares a cell with it."""
    cells = int(max(state.cell.max(initial=-1), base.cell.max(initial=-1))) + 1
    base_n = np.bincount(base.cell, base.sums[:, N_ALL], cells)
    base_k3 = np.bincount(base.cell, base.sums[:, K3_ABOVE], cells)
    if not base_k3.sum() > 0:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        rates = np.where(base_n > 0, base_k3 / base_n, 0.0)
    shared = base_n[state.cell] > 0
    rows = int(state.row.max(initial=-1)) + 1
    y = np.bincount(state.row[shared], state.sums[shared, K3_ABOVE], rows)
    e = np.bincount(state.row[shared], state.sums[shared, N_ALL] * rates[state.cell[shared]], rows)
    n = np.bincount(state.row[shared], state.sums[shared, N_ALL], rows)
    used = n > 0
    y, e, n = y[used], e[used], n[used]
    if len(y) == 0 or not e.sum() > 0:
        return None
    ratio = float(y.sum() / e.sum())
    var = _relvar(y, e, ratio) + _relvar_base(base, rates)
    half = Z95 * math.sqrt(var) if math.isfinite(var) else math.inf
    return TailExcess(
        ratio,
        (ratio * math.exp(-half), ratio * math.exp(half)),
        float(y.sum() / n.sum()),
        float(e.sum() / n.sum()),
        int(n.sum()),
    )


def _relvar(y: np.ndarray, e: np.ndarray, ratio: float) -> float:
    """The squared relative standard error of ``sum y / sum e``, sequences the clusters."""
    k = len(y)
    if k < 2:
        return math.inf
    scale = y.sum() if y.sum() > 0 else e.sum() * ratio
    if not scale > 0:
        return math.inf
    return float(k / (k - 1) * np.sum((y - ratio * e) ** 2) / scale**2)


def _relvar_base(base: HotSequenceState, rates: np.ndarray) -> float:
    """The baseline's own: its sequences' tail K3 against its per-cell rates."""
    rows = int(base.row.max(initial=-1)) + 1
    y = np.bincount(base.row, base.sums[:, K3_ABOVE], rows)
    e = np.bincount(base.row, base.sums[:, N_ALL] * rates[base.cell], rows)
    used = np.bincount(base.row, base.sums[:, N_ALL], rows) > 0
    return _relvar(y[used], e[used], 1.0)


__all__ = ["TailExcess", "tail_excess"]
