"""The aggregates of one batch of numpy arrays: the report's own numpy code
(``stats.chunk.chunk_partials``), on the host where the arrays are."""

from __future__ import annotations

import numpy as np

from mismatchctl.monitor.device import BatchState
from mismatchctl.stats import exp_poly
from mismatchctl.stats.bins import assign_bins
from mismatchctl.stats.chunk import chunk_partials
from mismatchctl.stats.state import Col, empty_state
from mismatchctl.stats.tails import Tails


def reduce_numpy(
    lr2: np.ndarray, lt2: np.ndarray, keep: np.ndarray, edges: np.ndarray, tails: Tails
) -> BatchState:
    """``device.reduce_batch`` for numpy arrays: the model tokens of each row form one sequence,
    its turns the runs of model tokens."""
    n_bins = len(edges) - 1
    lr, lt = lr2[keep].astype(np.float64), lt2[keep].astype(np.float64)
    if len(lr) == 0:
        return BatchState.empty(n_bins)
    rows = np.broadcast_to(np.arange(keep.shape[0])[:, None], keep.shape)[keep]
    before = np.zeros_like(keep)
    before[:, 1:] = keep[:, :-1]
    turn = np.cumsum((keep & ~before)[keep])  # a new value at every turn's first token
    whole = chunk_partials(lr, lt, rows, np.zeros(len(lr), np.int64), 1, turn=turn, tails=tails)
    codes = assign_bins(exp_poly.exp(lr), edges)  # the report's exp (numpy: no numba here)
    bins = chunk_partials(lr, lt, rows, codes, n_bins, with_hist=True, turn=turn, tails=tails)
    hists = np.stack([b.hist for b in bins if b.hist is not None])
    states = np.stack([b.state for b in bins])
    states[:, Col.SEGMENTS :] = empty_state()[Col.SEGMENTS :]  # bins carry token columns only
    return BatchState(whole[0].state.copy(), states, hists)
