"""An engine extra that keeps per-sequence sums (for bootstrap intervals), read with the report."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.engines.keys import PartKeys
from mismatchctl.stats.bootstrap import SeqStats
from mismatchctl.stats.state import Col
from mismatchctl.stats.turnruns import TurnRuns


class SequenceSums:
    """Per part: one row of sums per sequence; merging concatenates (memory grows with the number
    of sequences, a few floats each, not with tokens)."""

    columns: tuple[str, ...] = ()

    def compute(self, table: pa.Table, keys: PartKeys) -> SeqStats:
        if keys.runs is not None:  # the engine's turn runs already hold these sums
            return _from_runs(keys.runs)
        return SeqStats.from_tokens(
            keys.column(S.ROLLOUT), keys.column(S.TRAINER), keys.column(S.SEQ)
        )

    def merge(self, a: SeqStats, b: SeqStats) -> SeqStats:
        return a.merge(b)


def _from_runs(runs: TurnRuns) -> SeqStats:
    """Per-sequence sums as the sums of each sequence's turn runs (contiguous, in order)."""
    if len(runs.seq) == 0:
        return SeqStats.empty()
    starts = np.flatnonzero(np.r_[True, runs.seq[1:] != runs.seq[:-1]])
    s = runs.state

    def add(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values, starts)

    return SeqStats(
        add(s[:, Col.TOKENS]), add(s[:, Col.K3_SUM]), add(s[:, Col.ABS_R_SUM]),
        add(runs.lr_sum), add(runs.lt_sum),
    )  # fmt: skip
