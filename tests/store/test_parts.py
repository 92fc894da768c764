"""PartWriter: parts of whole sequences, written on lanes, several open at once for big sources."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchctl import schema as S
from mismatchctl.store.parts import SEQUENCES, TOKENS, Lanes, PartWriter


def _batch(first_seq: int, n_seqs: int, length: int) -> pa.Table:
    seq = np.repeat(np.arange(first_seq, first_seq + n_seqs), length)
    n = len(seq)
    return pa.table(
        {
            S.STEP: np.zeros(n, dtype=np.int64),
            S.SEQ: seq.astype(np.int64),
            S.SAMPLE_ID: [f"s{i}" for i in seq],
            S.TURN: np.zeros(n, dtype=np.int32),
            S.POSITION: np.tile(np.arange(length, dtype=np.int32), n_seqs),
            S.TOKEN_ID: pa.nulls(n, pa.int64()),
            S.ROLLOUT: -np.linspace(0.1, 2.0, n),
            S.TRAINER: -np.linspace(0.1, 2.0, n) + 0.01,
            S.GPU: ["H20"] * n,
            S.TOKEN_ENTROPY: np.linspace(0.0, 3.0, n),
        },
        schema=S.TOKEN_SCHEMA,
    )


@pytest.mark.parametrize("batches", [2, 12])
def test_two_slots_keep_sequences_whole_and_small_sources_in_one_part(
    tmp_path: Path, batches: int
) -> None:
    with Lanes() as lanes:  # 10 sequences of 4 tokens per batch; parts of at most 100 rows
        writer = PartWriter(tmp_path, TOKENS, "r", S.TOKEN_SCHEMA, 100, lanes, slots=2)
        for b in range(batches):
            writer.write(_batch(10 * b, 10, 4))
        records = writer.close()
    if batches == 2:  # 80 rows: below a part, one part
        assert len(records) == 1
    else:  # 480 rows: parts of at most 100 rows, two filled at once (their seq ranges interleave)
        assert len(records) >= 5
        ranges = sorted((r.min_seq, r.max_seq) for r in records)
        assert any(b[0] < a[1] for a, b in itertools.pairwise(ranges))
    seen = []
    for rec in records:
        table = pq.read_table(tmp_path / rec.path)
        seq = table.column(S.SEQ).to_numpy()
        assert rec.rows == len(seq) <= 100
        assert (np.diff(seq) >= 0).all() and (rec.min_seq, rec.max_seq) == (seq[0], seq[-1])
        assert table.schema.field(S.SAMPLE_ID).type == pa.string()  # read back as strings
        seen.append(seq)
    allseq = np.sort(np.concatenate(seen))
    assert allseq.tolist() == np.repeat(np.arange(10 * batches), 4).tolist()


def test_token_parts_are_lz4_and_other_parts_zstd(tmp_path: Path) -> None:
    """Token parts: every column LZ4 (logprobs byte-stream-split), ids and steps in dictionary
    pages; any other kind of part keeps zstd for its non-float columns."""
    batch = _batch(0, 10, 4)
    codecs = {}
    for kind in (TOKENS, SEQUENCES):
        writer = PartWriter(tmp_path / kind, kind, "r", S.TOKEN_SCHEMA, 100)
        writer.write(batch)
        (rec,) = writer.close()
        chunks = pq.ParquetFile(tmp_path / kind / rec.path).metadata.row_group(0)
        codecs[kind] = {
            chunks.column(i).path_in_schema: chunks.column(i) for i in range(chunks.num_columns)
        }
    for name, chunk in codecs[TOKENS].items():
        assert chunk.compression == "LZ4", name
    assert "BYTE_STREAM_SPLIT" in codecs[TOKENS][S.ROLLOUT].encodings
    assert "BYTE_STREAM_SPLIT" in codecs[TOKENS][S.TOKEN_ENTROPY].encodings
    assert any("DICT" in e for e in codecs[TOKENS][S.SEQ].encodings)
    assert codecs[SEQUENCES][S.SEQ].compression == "ZSTD"
    assert codecs[SEQUENCES][S.ROLLOUT].compression == "LZ4"
