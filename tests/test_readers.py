"""Every reader turns its format into the same canonical rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

import mismatchctl
from mismatchctl import schema as S
from tests.helpers import FIXTURES

FILES = {
    "parquet-sequence": [FIXTURES / "sequence.parquet"],
    "parquet-token": [FIXTURES / "token.parquet"],
    "slime-pt": sorted(FIXTURES.glob("slime_train_*.pt")),
    "nemo-jsonl": sorted(FIXTURES.glob("train_data_step*.jsonl")),
}
COMPARED = [S.STEP, S.SEQ, S.TURN, S.TOKEN_ID, S.ROLLOUT, S.TRAINER]


def _ingest(fmt: str, store: Path) -> pl.DataFrame:
    if fmt == "slime-pt":
        pytest.importorskip("torch")
    result = mismatchctl.ingest(FILES[fmt], run=fmt, store=store)
    assert {f.format for f in result.files} == {fmt}
    return mismatchctl.open_store(store).scan(fmt).collect()


@pytest.fixture
def reference(store: Path) -> pl.DataFrame:
    return _ingest("parquet-sequence", store)


@pytest.mark.parametrize("fmt", ["parquet-token", "slime-pt", "nemo-jsonl"])
def test_same_canonical_rows(fmt: str, store: Path, reference: pl.DataFrame) -> None:
    rows = _ingest(fmt, store)
    assert rows.select(COMPARED).equals(reference.select(COMPARED))


def test_reference_rows_are_the_model_tokens(reference: pl.DataFrame) -> None:
    assert reference.height == 21  # 6 + 4 + 0 + 6 + 5 model tokens
    # sequence (step 3, uid 0) has mask 1110011100: turns 0,0,0,1,1,1 at positions 0-2, 5-7
    first = reference.filter(pl.col(S.SEQ) == 0)
    assert first[S.TURN].to_list() == [0, 0, 0, 1, 1, 1]
    assert first[S.POSITION].to_list() == [0, 1, 2, 5, 6, 7]
    # a real token with logprob exactly 0.0 is kept (the mask decides, never the value)
    assert first[S.ROLLOUT][0] == 0.0
    assert reference.filter(pl.col(S.SEQ) == 3)[S.TURN].to_list() == [0, 0, 1, 2, 2, 2]


def test_nemo_positions_index_the_full_sequence(store: Path, reference: pl.DataFrame) -> None:
    nemo = _ingest("nemo-jsonl", store)
    assert (nemo[S.POSITION] - reference[S.POSITION]).unique().to_list() == [3]  # prompt of 3


def test_sequence_rows_keep_empty_sequences_and_counts(store: Path) -> None:
    mismatchctl.ingest(FILES["parquet-sequence"], run="r", store=store)
    seqs = mismatchctl.open_store(store).scan("r", kind="sequences").collect().sort(S.SEQ)
    assert seqs[S.MODEL_TOKENS].to_list() == [6, 4, 0, 6, 5]
    assert seqs[S.TURNS].to_list() == [2, 1, 0, 3, 2]
    assert seqs[S.TOOL_TOKENS].to_list() == [2, 0, 0, 3, 1]
    # right-padded to 10: trailing mask zeros and padding count as padding
    assert seqs[S.PAD_TOKENS].to_list() == [2, 6, 10, 1, 4]
    assert seqs[S.REWARD].to_list() == [0.0, 0.5, 1.0, 0.0, 0.5]


def test_tags_from_parquet_metadata_and_cli(store: Path) -> None:
    mismatchctl.ingest(FILES["parquet-sequence"], run="r", tags={"gpu": "H20"}, store=store)
    info = mismatchctl.open_store(store).run("r")
    assert info.tags == {"engine": "vllm-0.10.1", "gpu": "H20", "logprobs_mode": "processed"}
    rows = mismatchctl.open_store(store).scan("r").collect()
    assert rows[S.GPU].unique().to_list() == ["H20"]


def test_gpu_column_wins_over_tag(store: Path, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(FILES["parquet-sequence"][0])
    table = table.append_column("gpu", pa.array(["A100", "L20", "A100", None, "L20"]))
    path = tmp_path / "with_gpu.parquet"
    pq.write_table(table, path)
    mismatchctl.ingest([path], run="g", tags={"gpu": "H20"}, store=store)
    seqs = mismatchctl.open_store(store).scan("g", kind="sequences").collect().sort(S.SEQ)
    assert seqs[S.GPU].to_list() == ["A100", "L20", "A100", "H20", "L20"]


def test_mapping_other_column_names(store: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(FILES["parquet-sequence"][0])
    renamed = table.rename_columns(["it", "sid", "ids", "keep", "gen_lp", "fsdp_lp", "reward"])
    path = tmp_path / "custom.parquet"
    pq.write_table(renamed, path)
    mismatchctl.ingest(
        [path],
        run="m",
        store=store,
        mapping=[
            "rollout=gen_lp",
            "trainer=fsdp_lp",
            "mask=keep",
            "tokens=ids",
            "step=it",
            "sample_id=sid",
        ],
    )
    info = mismatchctl.open_store(store).run("m")
    assert info.sources[0].columns["rollout"] == "gen_lp"
    assert info.model_tokens == 21 and info.steps == [3, 4]


def test_no_mask_counts_every_token_and_says_so(store: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(FILES["parquet-sequence"][0]).drop_columns(["response_mask"])
    path = tmp_path / "step_7.parquet"
    pq.write_table(table.drop_columns(["step"]), path)
    result = mismatchctl.ingest([path], run="nomask", store=store)
    assert result.tally.model_tokens == 50  # 5 rows x 10 padded positions
    assert result.tally.steps == {7}  # from the file name
    assert any("no mask" in n for n in result.files[0].record.notes)


def test_long_sequence_layout_is_streamed_in_batches(store: Path, tmp_path: Path) -> None:
    """More tokens than one batch: rows split over several batches give the same totals."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    n_rows, width = 300, 4000
    lp = (-rng.exponential(0.5, (n_rows, width))).astype(np.float32)
    mask = (rng.random((n_rows, width)) < 0.9).astype(np.int8)
    table = pa.table(
        {
            "step": np.repeat(np.arange(3), 100),
            "rollout_log_probs": list(lp),
            "old_log_probs": list(lp * np.float32(1.01)),
            "response_mask": list(mask),
        }
    )
    path = tmp_path / "big.parquet"
    pq.write_table(table, path, row_group_size=64)
    result = mismatchctl.ingest([path], run="big", store=store)
    assert result.tally.model_tokens == int(mask.sum())
    rows = mismatchctl.open_store(store).scan("big").collect()
    assert rows.height == int(mask.sum())
    assert rows[S.SEQ].is_sorted() and rows[S.SEQ].n_unique() == n_rows
    np.testing.assert_array_equal(rows[S.ROLLOUT].to_numpy(), lp[mask == 1].astype(np.float64))
