"""Per-group sums and extremes of per-token values, as fast as the token layout allows.

``np.bincount`` and ``ufunc.at`` serialize when consecutive tokens hit the same bin (every add
waits for the previous one): one group per chunk, steps, turn kinds and sequences all come in long
runs of one code, where they run ~20x slower than ``ufunc.reduceat`` over the runs. So long runs
are first reduced with ``reduceat`` (pairwise summation: also more accurate), and only the run
results are scattered to groups; short runs (interleaved probability bins) go straight to
``bincount``/``ufunc.at``.
"""

from __future__ import annotations

import numpy as np

MIN_MEAN_RUN = 8  # below this mean run length, reduceat's per-run overhead loses to bincount


def run_starts(idx: np.ndarray) -> np.ndarray:
    """Positions where a new run of equal values begins (always including 0 when non-empty)."""
    if len(idx) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate(([True], idx[1:] != idx[:-1])))


class GroupReducer:
    """Reduce length-``n`` token arrays to ``size`` groups, given the runs of equal group index.

    ``starts``/``run_idx``: start position and group index of each run (a group may own several
    runs). ``idx`` (the per-token group index) is used when runs are short; it is rebuilt from the
    runs if not given.
    """

    def __init__(
        self,
        starts: np.ndarray,
        run_idx: np.ndarray,
        n: int,
        size: int,
        idx: np.ndarray | None = None,
    ) -> None:
        self.size = size
        self.lengths = np.diff(starts, append=n)
        self.use_runs = len(starts) * MIN_MEAN_RUN <= n
        self.starts, self.run_idx = starts, run_idx
        self.idx = idx if idx is not None or self.use_runs else np.repeat(run_idx, self.lengths)

    @classmethod
    def from_index(cls, idx: np.ndarray, size: int) -> GroupReducer:
        starts = run_starts(idx)
        return cls(starts, idx[starts], len(idx), size, idx)

    def counts(self) -> np.ndarray:
        """Tokens per group, as float64."""
        if self.use_runs:
            return np.bincount(self.run_idx, weights=self.lengths, minlength=self.size)
        return np.bincount(self.idx, minlength=self.size).astype(np.float64)

    def sum(self, values: np.ndarray) -> np.ndarray:
        if self.use_runs:
            return np.bincount(
                self.run_idx, weights=np.add.reduceat(values, self.starts), minlength=self.size
            )
        return np.bincount(self.idx, weights=values, minlength=self.size)

    def extreme(self, ufunc: np.ufunc, values: np.ndarray) -> np.ndarray:
        """Per-group ``np.minimum`` or ``np.maximum``; +inf / -inf for groups without tokens."""
        out = np.full(self.size, np.inf if ufunc is np.minimum else -np.inf)
        if self.use_runs:
            ufunc.at(out, self.run_idx, ufunc.reduceat(values, self.starts))
        else:
            ufunc.at(out, self.idx, values)
        return out

    def spread(self, per_group: np.ndarray) -> np.ndarray:
        """Each token's group value (e.g. its group mean, for a centred second pass)."""
        if self.use_runs:
            return np.repeat(per_group[self.run_idx], self.lengths)
        return per_group[self.idx]

    def centred(
        self, x: np.ndarray, sum_x: np.ndarray, n: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Deviations of ``x`` from its group mean, and their per-group sum of squares.

        The two-pass form avoids the cancellation of ``sum(x^2) - n mean^2``: it keeps
        ``log_ratio_std`` and the Pearson correlations accurate when the mean dwarfs the spread.
        """
        mean = sum_x / np.where(n > 0, n, 1.0)
        dx = x - self.spread(mean)
        return dx, self.sum(dx * dx)
