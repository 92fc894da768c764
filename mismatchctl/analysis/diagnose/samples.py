"""Samples named in a check's evidence: the sample id of each sequence listed, read from the
store's sequence rows (what `mismatchctl show` takes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc

from mismatchctl import schema as S
from mismatchctl.analysis.diagnose.check import CheckEvidence
from mismatchctl.columns import arrow_of
from mismatchctl.engines.plan import Selection
from mismatchctl.store.parts import read_columns


@dataclass(frozen=True, kw_only=True)
class Sample(CheckEvidence):
    """A sequence listed as evidence: ``sample_id`` from the store's sequence rows (None when
    they do not hold it), ``what`` is wrong with it."""

    run: str
    step: int
    sample_id: str | None
    seq: int
    what: str


def samples_of(selection: Selection, examples: list[tuple[str, int, int, str]]) -> list[Sample]:
    """The examples with the sample id of each sequence, read from the store's sequence rows."""
    wanted: dict[str, set[int]] = {}
    for run, _, seq, _ in examples:
        wanted.setdefault(run, set()).add(seq)
    ids: dict[tuple[str, int], str] = {}
    for run, seqs in wanted.items():
        for path in selection.sequence_paths.get(run, []):
            table = read_columns(path, [S.SEQ, S.SAMPLE_ID])
            table = table.filter(
                pc.is_in(
                    table.column(S.SEQ), value_set=arrow_of(np.array(sorted(seqs), dtype=np.int64))
                )
            )
            for seq, sid in zip(
                *(table.column(c).to_pylist() for c in (S.SEQ, S.SAMPLE_ID)), strict=True
            ):
                ids[(run, seq)] = sid
    return [
        Sample(run=run, step=step, sample_id=ids.get((run, seq)), seq=seq, what=what)
        for run, step, seq, what in examples
    ]
