"""Bins of token counts: KV positions, positions within a turn, sequence lengths; and the blocks of
a sequence's index in its step (``order``).

Position bins are ``[e_k, e_{k+1})`` over integer edges ``0 = e_0 < e_1 < ...``; the last bin is
open (``[e_last, inf)``), so no count falls outside. A bin is named by its lower edge (``1024``
stands for ``[1024, 2048)`` with the default edges), which does not depend on the data: labels
are the same in every part, run and store. The default edges are powers of two,
``0, 1, 2, 4, ..., 2**20``: 22 bins, the last one ``[1048576, inf)``.
"""

from __future__ import annotations

import numpy as np

from mismatchctl.stats.bins import FEW_EDGES, check_increasing

POSITION_MAX_LOG2 = 20
LOG2_EDGES: tuple[int, ...] = (0, *(1 << k for k in range(POSITION_MAX_LOG2 + 1)))
POSITION_SPEC = "log2"
EXPECTED = (
    "expected 'log2' (edges 0, 1, 2, 4, ..., 2^20) or comma-separated integer edges starting at 0, "
    "strictly increasing, such as 0,512,1024,4096"
)
ORDER_BLOCK = 32  # sequences per block of the ``order`` key
ORDER_BLOCKS = 64  # blocks at most: sequences past 63 x 32 share the last, open block


def parse_position_bins(spec: str) -> tuple[int, ...]:
    """Edges from ``log2`` or explicit integer edges (``0,512,1024``); ValueError if bad."""
    text = spec.strip()
    if text.lower() == POSITION_SPEC:
        return LOG2_EDGES
    parts = [p.strip() for p in text.split(",")] if text else []
    if not parts:
        raise ValueError(f"position bins: {EXPECTED} (found an empty string)")
    edges = []
    for part in parts:
        try:
            edges.append(int(part))
        except ValueError:
            raise ValueError(
                f"position bins '{spec}': edge '{part}' is not an integer; {EXPECTED}"
            ) from None
    if edges[0] != 0:
        raise ValueError(f"position bins '{spec}': edges must start at 0 (found {parts[0]})")
    check_increasing(edges, parts, f"position bins '{spec}'")
    return tuple(edges)


def assign_positions(values: np.ndarray, edges: tuple[int, ...] | np.ndarray) -> np.ndarray:
    """Bin index (int64) of every count: the number of edges after the first that are ``<=`` it
    (a negative count goes to bin 0, one past the last edge to the last, open bin)."""
    inner = np.asarray(edges, dtype=np.int64)[1:]
    values = np.asarray(values, dtype=np.int64)
    if len(inner) >= FEW_EDGES:
        return np.searchsorted(inner, values, side="right").astype(np.int64)
    # the same count, as one comparison per edge: ~4x faster than a binary search per token for
    # the default edges (as stats.bins.assign_bins)
    idx = np.zeros(len(values), dtype=np.int16)
    for edge in inner:
        idx += values >= edge
    return idx.astype(np.int64)


def position_labels(edges: tuple[int, ...] | np.ndarray) -> list[int]:
    """The label of every bin: its lower edge."""
    return [int(e) for e in edges]


def position_label(edges: tuple[int, ...] | np.ndarray, lower: int) -> str:
    """Human label of the bin whose lower edge is ``lower``: ``[1024, 2048)``, the last one
    ``[1048576, inf)``; a bin of one value (``[5, 6)``) is written as that value."""
    values = [int(e) for e in edges]
    k = values.index(int(lower))
    if k == len(values) - 1:
        return f"[{values[k]}, inf)"
    if values[k + 1] == values[k] + 1:
        return str(values[k])
    return f"[{values[k]}, {values[k + 1]})"


def order_blocks(order: np.ndarray, block: int = ORDER_BLOCK) -> np.ndarray:
    """Block code (int64) of each sequence's index in its step: ``index // block``, capped at
    ``ORDER_BLOCKS - 1``."""
    return np.minimum(np.asarray(order, dtype=np.int64) // block, ORDER_BLOCKS - 1)


def order_labels(block: int = ORDER_BLOCK) -> list[int]:
    """The label of every order block: the index of its first sequence."""
    return [k * block for k in range(ORDER_BLOCKS)]


def order_label(first: int, block: int = ORDER_BLOCK) -> str:
    """Human label of the block starting at sequence ``first``: ``[32, 64)``, the last one open."""
    if first // block >= ORDER_BLOCKS - 1:
        return f"[{first}, inf)"
    return f"[{first}, {first + block})"
