"""Prompt lengths (where kv_position counts from) from every format that carries them, and the
per-sequence attributes kept at ingest (automatically, with --attr, and a bad --attr refused).

The fixtures hold the same five responses (tests/data/make_fixtures.py): slime and NeMo-RL keep
the three prompt tokens in the sequence, verl's pickles in the prompt part of attention_mask; the
Parquet layouts get them here as a column or a list of prompt ids. Every format must then give each
model token the KV position 3 + its index in the response, computed below from the raw mask."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl.engines import plan as K
from mismatchctl.stats import registry as M
from tests.helpers import FIXTURES, cli

PROMPT = 3
UNIT_BINS = ",".join(str(i) for i in range(40))  # one bin per position


def _expected_kv(prompt: int = PROMPT) -> dict[int, int]:
    """Model tokens per KV position, from sequence.parquet's raw masks."""
    counts: dict[int, int] = {}
    for mask in pq.read_table(FIXTURES / "sequence.parquet").column("response_mask").to_pylist():
        for i in np.flatnonzero(np.asarray(mask) == 1):
            counts[prompt + int(i)] = counts.get(prompt + int(i), 0) + 1
    return counts


def _masks() -> list[list[int]]:
    return pq.read_table(FIXTURES / "sequence.parquet").column("response_mask").to_pylist()


def _leading_masked(mask: list[int]) -> int:
    """Masked positions before the first model token: prompt tokens the arrays hold (an
    all-masked sequence's positions count as padding)."""
    ones = np.flatnonzero(np.asarray(mask) == 1)
    return int(ones[0]) if len(ones) else 0


def _kv_counts(store: Path, run: str) -> dict[int, int]:
    rep = mismatchctl.report([run], by=["kv_position"], position_bins=UNIT_BINS, store=store)
    return {g.by[K.KV_POSITION]: g.metrics[M.TOKENS] for g in rep.split(K.KV_POSITION)}


def _with_columns(tmp_path: Path, name: str, **columns: pa.Array) -> Path:
    table = pq.read_table(FIXTURES / "sequence.parquet")
    for column, values in columns.items():
        table = table.append_column(column, values)
    out = tmp_path / name
    pq.write_table(table, out)
    return out


def test_sequence_parquet_prompt_length_column(store: Path, tmp_path: Path) -> None:
    path = _with_columns(tmp_path, "a.parquet", prompt_length=pa.array([PROMPT] * 5, pa.int64()))
    mismatchctl.ingest([path], run="col", store=store)
    assert _kv_counts(store, "col") == _expected_kv()


@pytest.mark.parametrize("column", ["prompts", "prompt_ids"])
def test_sequence_parquet_prompt_ids(store: Path, tmp_path: Path, column: str) -> None:
    ids = pa.array([[101, 102, 103]] * 5, pa.list_(pa.int64()))
    path = _with_columns(tmp_path, "b.parquet", **{column: ids})
    result = mismatchctl.ingest([path], run="ids", store=store)
    assert _kv_counts(store, "ids") == _expected_kv()
    assert result.files[0].record.prompt_lengths == 5
    # the prompt ids count as prompt tokens, as a prompt_length column's do (they were 0)
    leading = sum(_leading_masked(m) for m in _masks())
    assert result.tally.prompt_tokens == 5 * PROMPT + leading
    ran = cli("ingest", str(path), "--run", "ids2", "--store", str(store), "-q", "--json")
    assert json.loads(ran.out)["totals"]["prompt_tokens"] == 5 * PROMPT + leading


def test_token_parquet_prompt_length_column(store: Path, tmp_path: Path) -> None:
    table = pq.read_table(FIXTURES / "token.parquet")
    table = table.append_column("prompt_length", pa.array([PROMPT] * table.num_rows, pa.int64()))
    path = tmp_path / "token.parquet"
    pq.write_table(table, path)
    mismatchctl.ingest([path], run="tok", store=store)
    assert _kv_counts(store, "tok") == _expected_kv()


def test_slime_nemo_and_verl_carry_their_prompts(store: Path) -> None:
    for run, files, trust in (
        ("slime", ["slime_train_3.pt", "slime_train_4.pt"], False),
        ("nemo", ["train_data_step3.jsonl", "train_data_step4.jsonl"], False),
        ("verl", ["verl_batch_step3.pkl", "verl_batch_step4.pkl"], True),
    ):
        mismatchctl.ingest([FIXTURES / f for f in files], run=run, store=store, trust_pickle=trust)
        assert _kv_counts(store, run) == _expected_kv(), run


def test_without_prompt_lengths_a_note_and_the_response_position(store: Path) -> None:
    result = mismatchctl.ingest([FIXTURES / "sequence.parquet"], run="plain", store=store)
    assert result.files[0].record.prompt_lengths == 0
    assert any("no prompt lengths" in n for n in result.files[0].record.notes)
    assert _kv_counts(store, "plain") == _expected_kv(prompt=0)
    rep = mismatchctl.report(["plain"], by=["kv_position"], store=store)
    assert any("5 of 5 sequences have no prompt length" in n for n in rep.notes)


def test_attributes_kept_automatically_and_with_attr(store: Path, tmp_path: Path) -> None:
    path = _with_columns(
        tmp_path,
        "attrs.parquet",
        data_source=pa.array(["gsm8k", "math", "gsm8k", "math", None]),
        dp_rank=pa.array([0, 1, 0, 1, 0], pa.int64()),
        score=pa.array([0.1, 0.2, 0.3, 0.4, 0.5]),
    )
    result = mismatchctl.ingest([path], run="auto", store=store)
    record = result.files[0].record
    assert set(record.attributes) == {"data_source", "dp_rank"}  # floats only with --attr
    assert record.attributes["data_source"]["values"] == [["gsm8k", 2], ["math", 2], [None, 1]]
    rep = mismatchctl.report(["auto"], by=["attr:data_source"], store=store)
    tokens = {g.by["attr:data_source"]: g.metrics[M.TOKENS] for g in rep.split("attr:data_source")}
    masks = pq.read_table(path).column("response_mask").to_pylist()
    model = [int(np.sum(m)) for m in masks]
    assert tokens == {"gsm8k": model[0] + model[2], "math": model[1] + model[3], None: model[4]}
    ran = cli("runs", "show", "auto", "--store", str(store))
    assert "data_source: gsm8k (2), math (2), null (1)" in ran.out
    mismatchctl.ingest([path], run="named", store=store, attrs=["score"])
    rep = mismatchctl.report(["named"], by=["attr:score"], store=store)
    # the third response has no model token: no group
    assert sorted(g.by["attr:score"] for g in rep.split("attr:score")) == [
        "0.1",
        "0.2",
        "0.4",
        "0.5",
    ]


def test_many_values_are_left_out_with_a_note(store: Path, tmp_path: Path) -> None:
    n = 100
    table = pa.table(
        {
            "step": pa.array([1] * n, pa.int64()),
            "uid": [f"u{i}" for i in range(n)],
            "response_mask": pa.array([[1, 1]] * n, pa.list_(pa.int8())),
            "rollout_log_probs": pa.array([[-0.5, -0.1]] * n, pa.list_(pa.float32())),
            "old_log_probs": pa.array([[-0.4, -0.2]] * n, pa.list_(pa.float32())),
            "request_id": [f"r{i}" for i in range(n)],
        }
    )
    path = tmp_path / "many.parquet"
    pq.write_table(table, path)
    result = mismatchctl.ingest([path], run="many", store=store)
    assert result.files[0].record.attributes == {}
    assert any("`request_id` (100 values)" in note for note in result.files[0].record.notes)
    result = mismatchctl.ingest([path], run="kept", store=store, attrs=["request_id"])
    assert result.files[0].record.attributes["request_id"]["distinct"] == n


def test_a_bad_attr_names_the_file_as_given(store: Path, tmp_path: Path, monkeypatch) -> None:
    before = sorted(p.name for p in store.parent.iterdir())
    monkeypatch.chdir(tmp_path)
    path = _with_columns(tmp_path, "bad.parquet", data_source=pa.array(["a"] * 5))
    ran = cli("ingest", "bad.parquet", "--run", "x", "--attr", "env", "--store", str(store))
    assert ran.code != 0
    assert "bad.parquet" in ran.err and str(path) not in ran.err
    assert "--attr env" in ran.err and "`env`" in ran.err and "data_source" in ran.err
    assert "Hint:" in ran.err
    assert not (store / "catalog.sqlite").exists() or mismatchctl.open_store(store).runs() == []
    assert sorted(p.name for p in store.parent.iterdir()) == [*before, "bad.parquet"]


def test_a_note_many_files_share_is_written_once(store: Path, tmp_path: Path) -> None:
    paths = []
    for step in (1, 2, 3):
        table = pq.read_table(FIXTURES / "sequence.parquet")
        table = table.set_column(0, "step", pa.array([step] * table.num_rows, pa.int64()))
        paths.append(tmp_path / f"s{step}.parquet")
        pq.write_table(table, paths[-1])
    ran = cli("ingest", *map(str, paths), "--run", "n", "--store", str(store))
    assert ran.code == 0, ran.err
    out = " ".join((ran.out + ran.err).split())  # the terminal wraps long lines
    note = "no prompt lengths: kv_position counts from the first position of the arrays"
    assert out.count(note) == 1
    assert f"note: 3 files ({paths[0]} ... {paths[2]}): {note}" in out
