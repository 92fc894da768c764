"""The mean ratio of some sequences from their per-sequence sums (``stats/hot_sequences.py``):
``E_q[p/q] - 1`` over their tokens, with a standard error that treats each sequence as a
cluster.

The dumps' tokens are sampled from the rollout side's distribution ``q``, so when the trainer's
``p`` is a distribution over the same tokens, ``E_q[p/q] = 1`` exactly, however large the noise
or the gap between the two (other weights, a precision loss, a code path): the mean of
``exp(r) - 1`` is 0 up to sampling error. A truncation or a mask renormalised on the rollout
side removes a mass ``b`` of each context, and the mean falls by ``b`` (``stats/signed_parts.py``
weighs the parts of the run the cube's cells hold this way). Per token ``exp(r) - 1 = r + K3``
(``K3 = exp(r) - 1 - r``), so the per-sequence sums of ``r`` (the line's) and of K3 give it for
any set of whole sequences: some steps, some gpus."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mismatchctl.stats.hot_sequences import LINE, HotSequenceState

K3_COLUMN = 4  # HotSequenceState.sums: the sum of K3 over the cell's tokens
COUNT, R_SUM = LINE.start, LINE.start + 3  # the line's count and sum of r


@dataclass(frozen=True)
class MeanRatio:
    """``deficit``: ``1 - mean(exp r)`` over the sequences' tokens (the mass removed on the
    rollout side; negative: above 1); ``z``: the deficit over its sequence-clustered standard
    error; ``k3``: the mean K3 per token; ``tokens`` and ``sequences`` counted."""

    deficit: float
    z: float
    k3: float
    tokens: int
    sequences: int

    @property
    def per_k3(self) -> float:
        """The deficit per unit of K3 per token: a truncation's ``b`` against its ``b^2 / 2``
        (many), noise's sampling error against its K3 (about 1 or less)."""
        return self.deficit / self.k3 if self.k3 > 0 else math.inf


def mean_ratio(state: HotSequenceState) -> MeanRatio | None:
    """The mean ratio of every sequence of ``state`` (None: fewer than two sequences with tokens
    on the line). The line's tokens are those with finite logprobs; K3 is summed over the same
    cells."""
    rows, sums = state.row, state.sums
    n_seq = len(state.step)
    n = np.bincount(rows, weights=sums[:, COUNT], minlength=n_seq)
    a = np.bincount(rows, weights=sums[:, R_SUM] + sums[:, K3_COLUMN], minlength=n_seq)
    used = n > 0
    total, count = float(n[used].sum()), int(used.sum())
    if count < 2 or total <= 0:
        return None
    m = float(a[used].sum()) / total
    resid = a[used] - m * n[used]
    se = math.sqrt(float(np.sum(resid * resid)) * count / (count - 1)) / total
    k3 = float(sums[:, K3_COLUMN].sum()) / total
    z = -m / se if se > 0 else (0.0 if m == 0 else math.copysign(math.inf, -m))
    return MeanRatio(deficit=-m, z=z, k3=k3, tokens=int(total), sequences=count)


__all__ = ["MeanRatio", "mean_ratio"]
