"""Probability bins of ``pr = exp(rollout logprob)``: parsing ``--bins`` and assigning tokens.

Bin ``k`` spans ``[edges[k], edges[k+1])``; the last bin also holds 1 and the values just above it
that rounding produces (logprobs up to +1e-4 are accepted at ingest), so no token falls outside.
"""

from __future__ import annotations

import math

import numpy as np

# Default edges of METRICS.md: decades up to 1e-2, then the top decade split because most tokens
# sit near 1.
LOG_EDGES = np.array(
    [0.0, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 0.9, 0.99, 1.0], dtype=np.float64
)
_EXPECTED = "expected 'log', 'linear:N' or comma-separated edges from 0 to 1 such as 0,0.001,0.5,1"


def parse_bins(spec: str) -> np.ndarray:
    """Bin edges from ``log``, ``linear:N`` or explicit comma-separated edges; ValueError if bad."""
    text = spec.strip()
    if text.lower() == "log":
        return LOG_EDGES.copy()
    if text.lower().startswith("linear:"):
        return _linear(text[len("linear:") :].strip(), spec)
    return _explicit(text, spec)


def _linear(count: str, spec: str) -> np.ndarray:
    try:
        n = int(count)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(
            f"bins '{spec}': N of linear:N must be a positive integer (found '{count}')"
        )
    return np.linspace(0.0, 1.0, n + 1)


def _explicit(text: str, spec: str) -> np.ndarray:
    if not text:
        raise ValueError(f"bins: {_EXPECTED} (found an empty string)")
    parts = [p.strip() for p in text.split(",")]
    if len(parts) < 2:
        raise ValueError(f"bins '{spec}': {_EXPECTED} (found the single value {parts[0]})")
    edges = [_edge(p, spec) for p in parts]
    if edges[0] != 0.0:
        raise ValueError(f"bins '{spec}': edges must start at 0 (found {parts[0]})")
    if edges[-1] != 1.0:
        raise ValueError(f"bins '{spec}': edges must end at 1 (found {parts[-1]})")
    check_increasing(edges, parts, f"bins '{spec}'")
    return np.array(edges, dtype=np.float64)


def _edge(part: str, spec: str) -> float:
    try:
        value = float(part)
    except ValueError:
        raise ValueError(f"bins '{spec}': edge '{part}' is not a number; {_EXPECTED}") from None
    if not math.isfinite(value):
        raise ValueError(f"bins '{spec}': edge '{part}' is not finite")
    return value


FEW_EDGES = 64  # up to this many edges, bins are assigned by comparisons (see assign_bins)


def assign_bins(pr: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin index (int64) of every probability; 1 and values just above it go to the last bin."""
    edges = np.asarray(edges, dtype=np.float64)
    pr = np.asarray(pr, dtype=np.float64)
    if len(edges) > FEW_EDGES:
        idx = np.searchsorted(edges, pr, side="right") - 1
        return np.clip(idx, 0, len(edges) - 2).astype(np.int64)
    # the same count of edges <= pr, as one comparison per interior edge: several times faster
    # than a binary search per token for the dozen edges of the usual binnings
    idx = np.zeros(len(pr), dtype=np.int16)
    for edge in edges[1:-1]:
        idx += pr >= edge
    return idx.astype(np.int64)


def bin_label(edges: np.ndarray, k: int) -> str:
    """Human label of bin ``k``, e.g. ``[1e-08, 1e-07)``; the last bin is closed: ``[0.99, 1]``."""
    n_bins = len(edges) - 1
    if not 0 <= k < n_bins:
        raise ValueError(f"bin index must lie in 0..{n_bins - 1} (found {k})")
    close = "]" if k == n_bins - 1 else ")"
    return f"[{edges[k]:g}, {edges[k + 1]:g}{close}"


def check_increasing(edges: list[float] | list[int], parts: list[str], what: str) -> None:
    """A ValueError naming the first pair of edges that does not increase strictly."""
    for i in range(1, len(edges)):
        if edges[i] <= edges[i - 1]:
            raise ValueError(
                f"{what}: edges must be strictly increasing (found {parts[i - 1]} then {parts[i]})"
            )
