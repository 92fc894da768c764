"""An exact, mergeable top-k of scored rows (the worst tokens, the worst sequences).

The order is total: score descending, then the rows' tie keys ascending (``run, step, seq,
position`` for tokens, ``run, step, seq`` for sequences: the store's order). A row's tie key is
unique, so the k best rows of a union are the k best of the parts' k best, whatever the order in
which parts are merged: a part keeps at most k rows (memory follows k, not the data) and the
merged listing equals one full sort of every row.

Scores are finite or ``+inf`` (a K3 beyond float64); ``NaN`` never occurs (logprobs are finite).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def top_indices(score: np.ndarray, ties: Sequence[np.ndarray], k: int) -> np.ndarray:
    """Indices of the ``k`` best rows of one slice, best first: score descending, then ``ties``
    (arrays, most significant first) ascending. Exact: every row tied with the k-th best score
    is a candidate before the tie keys decide."""
    n = len(score)
    if k <= 0 or n == 0:
        return np.zeros(0, dtype=np.int64)
    if n > k:
        kth = np.partition(score, n - k)[n - k]  # the k-th largest score
        cand = np.flatnonzero(score >= kth)
    else:
        cand = np.arange(n)
    keys = [t[cand] for t in reversed(ties)]
    order = np.lexsort((*keys, -score[cand]))
    return cand[order[:k]]


@dataclass
class TopRows:
    """At most ``k`` rows with their scores and tie keys, best first. ``rows`` are the payload
    (dicts), ``tie`` each row's tie key (a tuple). ``seen`` counts the rows offered, ``tokens``
    the tokens behind them and ``total`` sums a value over those (the K3 of the cell), so that
    shares can be given."""

    k: int
    scores: list[float] = field(default_factory=list)
    tie: list[tuple[Any, ...]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    seen: int = 0
    tokens: int = 0
    total: float = 0.0

    def merge(self, other: TopRows) -> TopRows:
        """The k best of both (the same order as one sort of every row of both)."""
        scores = self.scores + other.scores
        tie = self.tie + other.tie
        rows = self.rows + other.rows
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], tie[i]))[: self.k]
        return TopRows(
            self.k,
            [scores[i] for i in order],
            [tie[i] for i in order],
            [rows[i] for i in order],
            self.seen + other.seen,
            self.tokens + other.tokens,
            self.total + other.total,
        )


__all__ = ["TopRows", "top_indices"]
