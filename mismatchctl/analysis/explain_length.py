"""`explain`'s length-scaling test: does a response's summed log ratio grow like sqrt(T) (noise:
numerics) or like T (a bias: semantics or another policy)?

The per-sequence sums (``stats/seq_sums.py``) come from the same read as the K3 cube (an engine
extra beside it), and the test is ``stats/length_scaling.py``'s, the function `diagnose`'s
``length_scaling`` check calls on the same sums: one selection's numbers are the check's for the
run it holds. A side is tested as one, its runs' sequences pooled (a baseline made of several
slices too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.engines.keys import PartKeys
from mismatchctl.stats.length_scaling import LengthScaling, length_scaling
from mismatchctl.stats.seq_sums import UNKNOWN, SeqSums, seq_sums

TARGET, BASELINE = "target", "baseline"


class SeqSumsExtra:
    """The engine's ``PartExtra`` of a side's per-sequence sums, keyed by the side (not the
    run): the test pools the side's sequences. No probability bins nor batch sizes (the
    length test reads neither): one bin, sizes unknown."""

    columns: tuple[str, ...] = ()

    def __init__(self, side: str) -> None:
        self.side = side

    def compute(self, table: pa.Table, keys: PartKeys) -> SeqSums:
        n = keys.n
        return seq_sums(
            self.side, keys.column(S.ROLLOUT), keys.column(S.TRAINER), keys.column(S.SEQ),
            keys.column(S.STEP), np.full(n, UNKNOWN, np.int64), np.zeros(n, np.int64), 1,
        )  # fmt: skip

    def merge(self, a: SeqSums, b: SeqSums) -> SeqSums:
        return a.merge(b)


@dataclass(frozen=True)
class SideScaling:
    """One side's test: which side, the selection it reads, the result."""

    side: str  # TARGET or BASELINE
    selection: str
    result: LengthScaling

    def to_dict(self) -> dict[str, Any]:
        return {"selection": self.selection, **self.result.to_dict()}


def side_scaling(side: str, selection: str, found: list[SeqSums | None]) -> SideScaling:
    """The test on a side's sums (``found``: one state per selection of the side, in order)."""
    merged = SeqSums()
    for sums in found:
        merged = merged.merge(sums) if sums is not None else merged
    run = merged.runs.get(side)
    if run is None:
        empty = np.zeros(0, np.float64)
        return SideScaling(side, selection, length_scaling(empty, empty))
    return SideScaling(side, selection, length_scaling(run.tokens, run.r_sum))
