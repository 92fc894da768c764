"""Bins of the per-token entropy (nats): the ``entropy`` key of the reports, explain and diagnose.

Bins are ``[e_k, e_{k+1})`` over fixed edges, the last one open; a bin is named by its lower
edge (the same in every part, run and store). Most tokens of a trained policy are nearly
deterministic (entropy below 0.01 nats) and the mismatch concentrates where the distribution is
flat, so the edges are about a factor of three to ten apart from 0.001 nats (a near-certain
token) to 4 nats (a distribution spread over ~50 tokens). A token without an entropy (the dump
has none) has the code after the last bin, labelled None.
"""

from __future__ import annotations

import numpy as np

ENTROPY_EDGES: tuple[float, ...] = (0.0, 0.001, 0.01, 0.1, 0.5, 1.0, 2.0, 4.0)
N_ENTROPY_BINS = len(ENTROPY_EDGES)  # the last bin is open
UNKNOWN_CODE = N_ENTROPY_BINS  # the code of a token without an entropy


def entropy_codes(values: np.ndarray) -> np.ndarray:
    """Each token's bin (int64); NaN (no entropy) gives ``UNKNOWN_CODE``. A value below 0 (the
    rounding noise ingest accepts) goes to the first bin."""
    values = np.asarray(values, dtype=np.float64)
    codes = np.searchsorted(np.asarray(ENTROPY_EDGES[1:]), values, side="right").astype(np.int64)
    codes[np.isnan(values)] = UNKNOWN_CODE
    return codes


def entropy_labels() -> list[float | None]:
    """Every code's label: the bin's lower edge, then None (no entropy)."""
    return [*ENTROPY_EDGES, None]


def entropy_label(lower: float | None) -> str | None:
    """Human label of the bin whose lower edge is ``lower``: ``[0.1, 0.5)``, the last
    ``[4, inf)``; None stays None (no entropy)."""
    if lower is None:
        return None
    k = ENTROPY_EDGES.index(float(lower))
    upper = f"{ENTROPY_EDGES[k + 1]:g})" if k + 1 < N_ENTROPY_BINS else "inf)"
    return f"[{ENTROPY_EDGES[k]:g}, {upper}"
