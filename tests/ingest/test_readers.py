"""Every reader turns its format into the same canonical rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import mismatchctl
from mismatchctl import schema as S
from tests.helpers import FIXTURES, cli

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
    """A ragged dump without mask (no padding: the responses as long as they are)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(FILES["parquet-sequence"][0])
    masks = table.column("response_mask").to_pylist()

    def ragged(column: str) -> pa.Array:
        values = table.column(column).to_pylist()
        return pa.array(
            [v[: len(m) - m[::-1].index(1)] for v, m in zip(values, masks, strict=True) if 1 in m]
        )

    cut = pa.table({c: ragged(c) for c in ("responses", "rollout_log_probs", "old_log_probs")})
    path = tmp_path / "step_7.parquet"
    pq.write_table(cut, path)
    result = mismatchctl.ingest([path], run="nomask", store=store)
    assert result.tally.model_tokens == 8 + 4 + 9 + 6  # each response up to its last model token
    assert result.tally.steps == {7}  # from the file name
    assert any("no mask" in n for n in result.files[0].record.notes)


def test_slime_train_dump_as_slime_writes_it(store: Path) -> None:
    """The fixture follows slime's save_debug_train_data (format_version 2, tensors, dp_shards):
    the response is the last response_lengths tokens, the rest is the prompt."""
    torch = pytest.importorskip("torch")
    mismatchctl.ingest(FILES["slime-pt"], run="s", store=store)
    seqs = mismatchctl.open_store(store).scan("s", kind="sequences").collect().sort(S.SEQ)
    expected_prompts, expected_ids = [], []
    for path in FILES["slime-pt"]:
        for sample in torch.load(path, weights_only=True)["samples"]:
            n = sample["response_lengths"]
            expected_prompts.append(len(sample["tokens"]) - n)
            expected_ids.append(str(sample["sample_index"]))
    assert seqs[S.PROMPT_TOKENS].to_list() == expected_prompts == [3] * 5
    assert seqs[S.SAMPLE_ID].to_list() == expected_ids == ["0", "1", "2", "0", "1"]
    assert seqs[S.MODEL_TOKENS].to_list() == [6, 4, 0, 6, 5]


def test_slime_sample_without_response_lengths(store: Path, tmp_path: Path) -> None:
    """tokens without response_lengths: the response is the last as many tokens as logprobs
    (the fallback length was a numpy integer the reader refused)."""
    torch = pytest.importorskip("torch")
    samples = [
        {
            "tokens": torch.tensor([101, 102, 103, 7, 8, 9]),
            "loss_masks": [1, 0, 1],
            "rollout_log_probs": torch.tensor([-0.5, 0.0, -1.25]),
            "log_probs": torch.tensor([-0.5, 0.0, -1.0]),
        }
    ]
    path = tmp_path / "train_4.pt"
    torch.save({"format_version": 2, "rollout_id": 4, "rank": 0, "samples": samples}, path)
    mismatchctl.ingest([path], run="s", store=store)
    rows = mismatchctl.open_store(store).scan("s").collect()
    assert rows[S.TOKEN_ID].to_list() == [7, 9]
    seqs = mismatchctl.open_store(store).scan("s", kind="sequences").collect()
    assert seqs[S.PROMPT_TOKENS].to_list() == [3]


def _nemo_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_nemo_files_are_what_nemo_rl_writes(store: Path) -> None:
    """Every value in an outer list of one, plus idx: the sample id; the arrays right-padded
    past input_lengths, which counts as padding."""
    lines = _nemo_lines(FILES["nemo-jsonl"][0])
    assert all(
        isinstance(x["generation_logprobs"][0], list) and x["rewards"] == [x["rewards"][0]]
        for x in lines
    )
    mismatchctl.ingest(FILES["nemo-jsonl"], run="n", store=store)
    seqs = mismatchctl.open_store(store).scan("n", kind="sequences").collect().sort(S.SEQ)
    assert seqs[S.SAMPLE_ID].to_list() == ["0", "1", "2", "0", "1"]
    expected_pad = []
    for path in FILES["nemo-jsonl"]:
        for x in _nemo_lines(path):
            mask = np.array(x["token_loss_mask"][0])
            last = np.flatnonzero(mask)[-1] if mask.any() else -1
            expected_pad.append(len(mask) - 1 - last if mask.any() else len(mask))
            assert len(mask) - x["input_lengths"][0] <= expected_pad[-1]
    assert seqs[S.PAD_TOKENS].to_list() == expected_pad


def test_nemo_multi_turn_line_counts(store: Path, tmp_path: Path) -> None:
    """One GRPO sample: prompt 38, a turn of 40, a tool response of 24, a turn of 62, padded to
    a multiple of 64 (192): 102 model tokens, prompt 38, tool 24, padding 28."""
    from tests.data.make_fixtures import log_batched_dict_as_jsonl, nemo_log_data

    rng = np.random.default_rng(1)
    segments = [(38, 0), (40, 1), (24, 0), (62, 1)]
    mask = [m for n, m in segments for _ in range(n)]
    gen = [
        float(np.float32(-v)) if m else 0.0
        for v, m in zip(rng.exponential(0.7, len(mask)), mask, strict=True)
    ]
    prev = [
        g * 1.01 if m else float(np.float32(-rng.exponential(1.0)))
        for g, m in zip(gen, mask, strict=True)
    ]
    prev[0] = 0.0  # the dummy slot
    sample = {
        "tokens": [int(t) for t in rng.integers(1, 5000, len(mask))],
        "mask": mask, "gen": gen, "prev": prev, "reward": 1.0, "content": ["q", "a", "tool", "b"],
    }  # fmt: skip
    path = tmp_path / "train_data_step12.jsonl"
    log_batched_dict_as_jsonl(nemo_log_data([sample], width=192), path)
    result = mismatchctl.ingest([path], run="n", store=store)
    t = result.tally
    assert (t.model_tokens, t.prompt_tokens, t.tool_tokens, t.pad_tokens) == (102, 38, 24, 28)
    assert t.steps == {12}
    rows = mismatchctl.open_store(store).scan("n").collect()
    keep = np.array(mask) == 1
    np.testing.assert_array_equal(rows[S.ROLLOUT].to_numpy(), np.array(gen)[keep])
    np.testing.assert_array_equal(rows[S.POSITION].to_numpy(), np.flatnonzero(keep))
    # the same line without the outer lists (a flat file) gives the same rows
    line = _nemo_lines(path)[0]
    flat = {k: (v if k == "idx" else v[0]) for k, v in line.items()}
    flat_path = tmp_path / "train_data_step13.jsonl"
    flat_path.write_text(json.dumps(flat) + "\n")
    again = mismatchctl.ingest([flat_path], run="flat", store=store).tally
    assert (again.model_tokens, again.prompt_tokens, again.tool_tokens, again.pad_tokens) == (
        102, 38, 24, 28,
    )  # fmt: skip


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


def test_a_large_file_is_streamed_not_pre_buffered_with_the_same_rows(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose read columns hold more compressed bytes than ``PRE_BUFFER_BYTES`` is read
    through a buffer (pyarrow pre-buffers every row group's chunks before the first batch: the
    whole file's columns in memory, docs/benchmarks.md "Report memory"), with the same rows as
    the pre-buffered read; the bytes are the footer's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mismatchctl.ingest import parquet_sequence

    rng = np.random.default_rng(1)
    lp = (-rng.exponential(0.5, (120, 50))).astype(np.float32)
    table = pa.table({"step": np.repeat(np.arange(2), 60), "rollout_log_probs": list(lp),
                      "old_log_probs": list(lp * np.float32(1.02)),
                      "response_mask": list(np.ones((120, 50), np.int8))})  # fmt: skip
    path = tmp_path / "groups.parquet"
    pq.write_table(table, path, row_group_size=16)
    pf = pq.ParquetFile(path)
    columns = ["rollout_log_probs", "old_log_probs"]
    want = sum(pf.metadata.row_group(g).column(c).total_compressed_size
               for g in range(pf.metadata.num_row_groups) for c in (1, 2))  # fmt: skip
    assert parquet_sequence._buffered_bytes(pf, columns) == want > 0
    opened: list[bool] = []
    real = pq.ParquetFile

    def spy(*args: object, **kwargs: object) -> pq.ParquetFile:
        opened.append(kwargs.get("pre_buffer", True) is False)
        return real(*args, **kwargs)

    monkeypatch.setattr(parquet_sequence.pq, "ParquetFile", spy)
    mismatchctl.ingest([path], run="buffered", store=store)
    assert opened == [False]  # small: pre-buffered as ever
    monkeypatch.setattr(parquet_sequence, "PRE_BUFFER_BYTES", want - 1)
    mismatchctl.ingest([path], run="streamed", store=store)
    assert opened == [False, False, True]  # large: opened again, streamed
    got = {r: mismatchctl.open_store(store).scan(r).collect() for r in ("buffered", "streamed")}
    for column in (S.SEQ, S.STEP, S.ROLLOUT, S.TRAINER):
        assert got["buffered"][column].to_list() == got["streamed"][column].to_list()


def test_an_ingest_without_model_tokens_warns(store: Path, tmp_path: Path) -> None:
    """An all-masked file is ingested (its sequences are counted) with a warning, per file and
    for the whole call, on stderr and in the JSON summary."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(FILES["parquet-sequence"][0])
    masks = [[0] * len(m) for m in table.column("response_mask").to_pylist()]
    index = table.schema.get_field_index("response_mask")
    masked = table.set_column(index, "response_mask", pa.array(masks, pa.list_(pa.int8())))
    path = tmp_path / "step_3.parquet"
    pq.write_table(masked, path)
    ran = cli("ingest", str(path), "--run", "m", "-q", "--json")
    assert ran.code == 0, ran.err
    warnings = [
        f"{path} adds no model token (every position of its 5 sequences is masked)",
        "this ingest adds no model token to run `m`: there is nothing to report on; check the "
        "mask (`--map mask=<column>`, 1 = model token)",
    ]
    assert json.loads(ran.out)["warnings"] == warnings
    assert ran.err == "".join(f"Warning: {w}\n" for w in warnings)
    ran = cli("ingest", str(FILES["parquet-sequence"][0]), str(path), "--run", "n", "-q")
    assert ran.code == 0
    assert f"Warning: {path} adds no model token" in " ".join(ran.err.split())
    assert "this ingest adds no model token" not in ran.err  # the other file has some
