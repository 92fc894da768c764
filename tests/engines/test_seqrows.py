"""A source's sequence rows carry each sequence's weight lag when an extra asks for it (the
``weight_lag`` key: diagnose's staleness sums), read with the rows the engine reads anyway."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl import schema as S
from mismatchctl.engines import plan as K
from mismatchctl.engines import seqrows


def _part(path: Path, seq: list[int], lags: list[int | None] | None) -> str:
    columns = {S.SEQ: pa.array(seq, pa.int64()), S.STEP: pa.array([3] * len(seq), pa.int64()),
               S.MODEL_TOKENS: pa.array([10] * len(seq), pa.int64())}  # fmt: skip
    if lags is not None:
        columns[S.WEIGHT_LAG] = pa.array(lags, pa.int64())
    pq.write_table(pa.table(columns), path)
    return str(path)


def test_each_sequence_has_its_weight_lag_and_the_unknown_ones_none(tmp_path: Path) -> None:
    with_lags = _part(tmp_path / "a.parquet", [7, 2, 5], [1, None, 0])
    without = _part(tmp_path / "b.parquet", [9, 4], None)
    rows = seqrows.load("r", (with_lags, without), (K.WEIGHT_LAG,))
    assert rows.seq.tolist() == [2, 4, 5, 7, 9]
    assert rows.weight_lag is not None
    none = seqrows.NO_WEIGHT_LAG
    assert rows.weight_lag.tolist() == [none, none, 0, 1, none]
    assert rows.weight_lag[rows.rows(np.array([7, 7, 9]))].tolist() == [1, 1, none]


def test_the_lags_are_read_only_when_asked_for(tmp_path: Path) -> None:
    path = _part(tmp_path / "a.parquet", [1, 2], [0, 3])
    names = pq.read_schema(path).names
    assert S.WEIGHT_LAG not in seqrows.columns_for((K.LENGTH,), names)
    assert S.WEIGHT_LAG in seqrows.columns_for((K.LENGTH, K.WEIGHT_LAG), names)
    assert seqrows.load("r", (path,), (K.LENGTH,)).weight_lag is None
    assert K.needs_sequence_rows(K.WEIGHT_LAG) and not K.is_key(K.WEIGHT_LAG)
