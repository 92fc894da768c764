"""Batch-shape dependence: do sequences computed in batches of different sizes, in the same
steps, show different mismatch at the same token probabilities? (A kernel that is not
batch-invariant: split-K or reduction order chosen by the batch size.)

Only the steps that hold sequences of at least two batch sizes count. In them, every token's
expected K3 is the rate of its (step, probability bin) over all the step's batch sizes; per
batch size, the observed K3 over the expected is its *rate ratio* (1 for every size when the
mismatch does not depend on the batch: the same probabilities, the same steps). The test's
number is the *spread*, the largest rate ratio over the smallest (of sizes with at least
``MIN_TOKENS`` tokens), with a bootstrap interval over sequences (resampled within each step
and size, the expected rates held fixed; ``RESAMPLES``, a fixed seed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mismatchctl.stats.seq_sums import UNKNOWN, RunSeqSums

MIN_TOKENS = 2_000  # tokens of a batch size for its rate ratio to count
RESAMPLES = 200
SEED = 20_240_045
LEVEL = 0.95


@dataclass(frozen=True)
class SizeRate:
    """One batch size in the shared steps: sequences, tokens, its rate ratio."""

    batch_size: int
    sequences: int
    tokens: int
    ratio: float


@dataclass(frozen=True)
class BatchShape:
    """The test's result: the sizes compared (ascending) and the spread between the extreme
    ones (None when fewer than two sizes share steps with enough tokens)."""

    steps: int  # steps holding at least two batch sizes
    sizes: tuple[SizeRate, ...]
    spread: float | None
    interval: tuple[float, float] | None
    high: int | None  # the size of the largest rate ratio
    low: int | None

    def to_dict(self) -> dict:
        return {
            "steps": self.steps,
            "sizes": [s.__dict__ for s in self.sizes],
            "spread": self.spread,
            "interval": list(self.interval) if self.interval else None,
            "high": self.high,
            "low": self.low,
        }


def batch_shape(sums: RunSeqSums) -> BatchShape | None:
    """The test on one run; None when its dump gives no batch sizes."""
    known = sums.batch_size != UNKNOWN
    if not known.any():
        return None
    step, size = sums.step[known], sums.batch_size[known]
    shared = _shared_steps(step, size)
    use = np.isin(step, shared)
    step, size = step[use], size[use]
    bins, k3_bins, k3 = sums.bins[known][use], sums.k3_bins[known][use], sums.k3[known][use]
    expected = _expected(step, bins, k3_bins)
    sizes = []
    for value in np.unique(size):
        m = size == value
        tokens = int(bins[m].sum())
        if tokens >= MIN_TOKENS and expected[m].sum() > 0:
            sizes.append(SizeRate(int(value), int(m.sum()), tokens, _ratio(k3[m], expected[m])))
    if len(sizes) < 2:
        return BatchShape(len(shared), tuple(sizes), None, None, None, None)
    hi = max(sizes, key=lambda s: s.ratio)
    lo = min(sizes, key=lambda s: s.ratio)
    interval = _interval(step, size, k3, expected, hi.batch_size, lo.batch_size)
    spread = hi.ratio / lo.ratio if lo.ratio > 0 else None
    return BatchShape(len(shared), tuple(sizes), spread, interval, hi.batch_size, lo.batch_size)


def _shared_steps(step: np.ndarray, size: np.ndarray) -> np.ndarray:
    """The steps with sequences of at least two batch sizes."""
    pairs = np.unique(np.stack([step, size], axis=1), axis=0)
    steps, counts = np.unique(pairs[:, 0], return_counts=True)
    return steps[counts >= 2]


def _expected(step: np.ndarray, bins: np.ndarray, k3_bins: np.ndarray) -> np.ndarray:
    """Each sequence's expected K3: its tokens per bin at its step's rate per bin."""
    out = np.zeros(len(step))
    for value in np.unique(step):
        m = step == value
        n, k = bins[m].sum(axis=0), k3_bins[m].sum(axis=0)
        rate = np.divide(k, n, out=np.zeros_like(k), where=n > 0)
        out[m] = bins[m] @ rate
    return out


def _ratio(observed: np.ndarray, expected: np.ndarray) -> float:
    return float(observed.sum() / expected.sum())


def _interval(
    step: np.ndarray, size: np.ndarray, k3: np.ndarray, expected: np.ndarray, hi: int, lo: int
) -> tuple[float, float] | None:
    """Percentile interval of the spread (``hi``'s ratio over ``lo``'s): the sequences of each
    (step, size) resampled with replacement."""
    rng = np.random.default_rng(SEED)
    cells = [
        np.flatnonzero((step == s) & (size == b)) for s, b in set(zip(step, size, strict=True))
    ]
    cells = sorted(cells, key=lambda c: int(c[0]))
    found = []
    for _ in range(RESAMPLES):
        w = np.zeros(len(step))
        for c in cells:
            np.add.at(w, c[rng.integers(0, len(c), len(c))], 1.0)
        a, b = (_weighted(w, size == v, k3, expected) for v in (hi, lo))
        if a is not None and b:
            found.append(a / b)
    if len(found) < RESAMPLES // 2:
        return None
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(found, [tail, 100 - tail])
    return float(low), float(high)


def _weighted(w: np.ndarray, m: np.ndarray, k3: np.ndarray, expected: np.ndarray) -> float | None:
    e = float((w[m] * expected[m]).sum())
    return float((w[m] * k3[m]).sum()) / e if e > 0 else None
