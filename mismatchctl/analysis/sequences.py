"""An engine extra that keeps per-sequence sums (for bootstrap intervals), read with the report."""

from __future__ import annotations

import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.engines.keys import PartKeys
from mismatchctl.stats.bootstrap import SeqStats


class SequenceSums:
    """Per part: one row of sums per sequence; merging concatenates (memory grows with the number
    of sequences, a few floats each, not with tokens)."""

    columns: tuple[str, ...] = ()

    def compute(self, table: pa.Table, keys: PartKeys) -> SeqStats:
        return SeqStats.from_tokens(
            keys.column(S.ROLLOUT), keys.column(S.TRAINER), keys.column(S.SEQ)
        )

    def merge(self, a: SeqStats, b: SeqStats) -> SeqStats:
        return a.merge(b)
