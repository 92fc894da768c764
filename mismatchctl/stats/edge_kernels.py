"""Compiled per-token pass of the turn-edge state (``analysis/turn_edges.py``): every token's
codes of the edge cubes and of the turn-end cube, which cube keeps it, and the |r| histogram,
in one walk over the turn runs of a slice (numba, cached on disk).

The numpy version it replaces built the codes from a dozen whole-slice temporaries and then a
filtered copy of the logprobs, sequences and codes for each cube; here the cubes read the slice
as it is with a mask (``cube_kernels.cube_accumulate``'s ``keep``), so the sums are the same
additions in the same order.
"""

from __future__ import annotations

import math

import numpy as np

from mismatchctl.stats.numba_load import kernel

FIRST, LATER, FINITE = 1, 2, 4  # bits of ``keep``: first-turn cube, later-turn cube, ends cube


@kernel(nogil=True, inline="always")
def _count_le(edges: np.ndarray, value: float) -> int:
    """How many of the (increasing) ``edges`` are <= ``value``: numpy's
    ``searchsorted(edges, value, side="right")``, every edge compared without a branch (|r| is
    random: a bisection mispredicts about half its steps; over the 74 |r| edges it took 4-8
    times as long as this vectorised count, measured)."""
    k = 0
    for j in range(edges.shape[0]):
        k += edges[j] <= value
    return k


@kernel(nogil=True, error_model="numpy")
def edge_pass(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    turn: np.ndarray,
    bins: np.ndarray,
    start_inner: np.ndarray,
    final_inner: np.ndarray,
    r_edges: np.ndarray,
    edge_tokens: int,
    nbins: int,
    row: np.ndarray,
    codes: np.ndarray,
    ends: np.ndarray,
    keep: np.ndarray,
    hist: np.ndarray,
) -> None:
    """Per token of whole sequences (a turn run's tokens contiguous and in order): ``row`` its
    sequence's index in the slice; ``codes`` (distance class from the turn run's start by
    ``start_inner``, among the last ``edge_tokens`` of a run a later turn follows, bin);
    ``ends`` (distance class from the run's last token by ``final_inner``, 1 when no later turn
    follows the run, bin); ``keep`` the bits ``FIRST``/``LATER`` (both logprobs finite, turn 0 /
    later) and ``FINITE``; and, where ``|r|`` is finite, one count in ``hist`` (flat: turn kind,
    within ``edge_tokens`` of the start, bin, |r| bin by ``r_edges``)."""
    n = lr.shape[0]
    nr = r_edges.shape[0]
    i = 0
    s = -1
    while i < n:
        j = i + 1
        while j < n and seq[j] == seq[i] and turn[j] == turn[i]:
            j += 1
        if i == 0 or seq[i] != seq[i - 1]:
            s += 1
        followed = j < n and seq[j] == seq[i]
        later = 1 if turn[i] > 0 else 0
        side = LATER if later else FIRST
        for k in range(i, j):
            start, to_end, b = k - i, j - 1 - k, bins[k]
            row[k] = s
            codes[k, 0] = _count_le(start_inner, start)
            codes[k, 1] = 1 if followed and to_end < edge_tokens else 0
            codes[k, 2] = b
            ends[k, 0] = _count_le(final_inner, to_end)
            ends[k, 1] = 0 if followed else 1
            ends[k, 2] = b
            finite = math.isfinite(lr[k]) and math.isfinite(lt[k])
            keep[k] = (side | FINITE) if finite else 0
            r = abs(lt[k] - lr[k])
            if math.isfinite(r):
                rbin = min(max(_count_le(r_edges, r) - 1, 0), nr - 1)
                edge = 1 if start < edge_tokens else 0
                hist[((later * 2 + edge) * nbins + b) * nr + rbin] += 1.0
        i = j
