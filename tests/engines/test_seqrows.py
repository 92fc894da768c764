"""A source's sequence rows carry each sequence's weight lag when an extra asks for it (the
``weight_lag`` key: diagnose's staleness sums), read with the rows the engine reads anyway."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

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


def test_each_sequence_file_is_opened_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its schema and the columns it has come from one open (a run of 1,000 steps has 1,000
    sequence files): a column a key asks for that a file lacks is unknown for its rows only."""
    with_lags = _part(tmp_path / "a.parquet", [7, 2], [1, 0])
    without = _part(tmp_path / "b.parquet", [9], None)
    opened: list[str] = []
    real = pq.ParquetFile

    def counted(path: str, *args: object, **kw: object) -> pq.ParquetFile:
        opened.append(str(path))
        return real(path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(pq, "ParquetFile", counted)
    monkeypatch.setattr(pq, "read_schema", lambda *a, **k: pytest.fail("a second open"))
    rows = seqrows.load("r", (with_lags, without), (K.WEIGHT_LAG, K.KV_POSITION, K.DUMP_ORDER))
    assert sorted(opened) == sorted([with_lags, without])
    assert rows.seq.tolist() == [2, 7, 9]
    assert rows.weight_lag is not None
    assert rows.weight_lag.tolist() == [0, 1, seqrows.NO_WEIGHT_LAG]
    assert rows.prompt_length.tolist() == [seqrows.UNKNOWN] * 3  # neither file has them


def test_the_columns_a_key_may_ask_for_are_those_of_a_file_with_every_column() -> None:
    every = seqrows.columns_for((K.KV_POSITION, K.BATCH_SIZE, K.WEIGHT_LAG, "attr:source"))
    assert every[:3] == [S.SEQ, S.STEP, S.MODEL_TOKENS]
    assert every[3:] == [
        S.PROMPT_LENGTH, S.BATCH_ID, S.BATCH_SIZE, S.WEIGHT_LAG, S.attribute_column("source")
    ]  # fmt: skip
    assert seqrows.columns_for((K.LENGTH,)) == [S.SEQ, S.STEP, S.MODEL_TOKENS]
