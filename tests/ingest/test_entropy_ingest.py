"""The per-sequence `entropy` column: mean per-token entropy over the model tokens, or null."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import schema as S
from tests.helpers import FIXTURES, cli, tree_digest

NAN = float("nan")
HINT = "\n\nHint: fix the dump, or pass --skip-bad to drop bad samples (they are counted and listed).\n"


def _seq_file(path: Path, roll: list, mask: list | None = None, **extra) -> Path:
    """Sequence layout; the trainer side equals the rollout side."""
    cols = {
        "uid": [f"s{i}" for i in range(len(roll))],
        "rollout_log_probs": pa.array(roll, pa.list_(pa.float64())),
        "old_log_probs": pa.array(roll, pa.list_(pa.float64())),
        **extra,
    }
    if mask is not None:
        cols["response_mask"] = pa.array(mask, pa.list_(pa.int8()))
    pq.write_table(pa.table(cols), path)
    return path


def _entropies(store: Path, path: Path, *args: str, run: str = "r") -> list[float | None]:
    """Ingest through the CLI, then the stored entropy of each sequence in `seq` order."""
    ran = cli("ingest", str(path), "--run", run, "-q", *args)
    assert ran.code == 0, ran.err
    return _stored(store, run)


def _stored(store: Path, run: str) -> list[float | None]:
    seqs = mismatchctl.open_store(store).scan(run, kind="sequences").collect().sort(S.SEQ)
    assert seqs.schema[S.ENTROPY] == pl.Float64
    return seqs[S.ENTROPY].to_list()


def _fails(store: Path, path: Path, *args: str) -> str:
    before = tree_digest(store)
    ran = cli("ingest", str(path), "--run", "new", "-q", *args)
    assert ran.code == 1, ran.err
    assert tree_digest(store) == before
    assert ran.out == ""
    return ran.err


def test_schema_has_a_nullable_entropy_after_reward() -> None:
    names = S.SEQUENCE_SCHEMA.names
    assert names.index(S.ENTROPY) == names.index(S.REWARD) + 1
    field = S.SEQUENCE_SCHEMA.field(S.ENTROPY)
    assert field.type == pa.float64() and field.nullable
    assert S.ROLE_ENTROPY in S.ROLES and S.SCHEMA_VERSION == 3


def test_list_column_is_averaged_over_model_tokens(store: Path, tmp_path: Path) -> None:
    """Masked positions (tool tokens, padding) may hold anything: 1e9, NaN, negative values."""
    roll = [[-0.5] * 6, [-0.25] * 4, [-1.0] * 3, [-0.1] * 5]
    mask = [[1, 1, 0, 0, 1, 0], [1, 1, 1, 1], [0, 0, 0], [0, 1, 0, 1, 0]]
    entropy = [
        [0.5, 1.25, 1e9, NAN, 2.0, -7.0],  # model tokens 0.5, 1.25, 2.0 -> 3.75 / 3
        [0.0, 0.125, 0.25, 0.375],  # 0.75 / 4
        [NAN, 1e9, -1.0],  # no model tokens: null
        [float("inf"), 3.0, NAN, 0.0, 1e9],  # 3.0 / 2
    ]
    path = _seq_file(
        tmp_path / "x.parquet", roll, mask, entropys=pa.array(entropy, pa.list_(pa.float64()))
    )
    assert _entropies(store, path) == [1.25, 0.1875, None, 1.5]


def test_list_column_mean_is_exact_float64(store: Path, tmp_path: Path) -> None:
    """The sum over the model tokens in position order, divided by their count, in float64."""
    rng = np.random.default_rng(3)
    lengths = [7, 1, 30, 12]
    masks = [(rng.random(n) < 0.7).astype(np.int8) for n in lengths]
    masks[1][:] = 1
    values = [rng.exponential(1.3, n) for n in lengths]
    path = _seq_file(
        tmp_path / "x.parquet",
        [[-0.1] * n for n in lengths],
        [m.tolist() for m in masks],
        entropy=pa.array([v.tolist() for v in values], pa.list_(pa.float64())),
    )
    expected = []
    for m, v in zip(masks, values, strict=True):
        kept = [float(x) for x, k in zip(v, m, strict=True) if k]
        expected.append(sum(kept, 0.0) / len(kept) if kept else None)
    got = _entropies(store, path)
    assert got == expected
    assert got[0] == pytest.approx(math.fsum(values[0][masks[0] == 1]) / masks[0].sum())


def test_list_column_without_mask_counts_every_token(store: Path, tmp_path: Path) -> None:
    path = _seq_file(
        tmp_path / "x.parquet",
        [[-0.1, -0.2], [-0.3]],
        token_entropy=pa.array([[1.0, 2.0], [0.5]], pa.list_(pa.float32())),
    )
    assert _entropies(store, path) == [1.5, 0.5]


def test_scalar_column_is_taken_as_is(store: Path, tmp_path: Path) -> None:
    """One mean per response; a null is an unknown; an empty sequence has none (whatever the
    dump wrote for it)."""
    path = _seq_file(
        tmp_path / "x.parquet",
        [[-0.1, -0.2], [-0.3], [-0.5, -0.5], [-0.4]],
        [[1, 0], [1], [0, 0], [1]],
        entropies=pa.array([0.7, None, NAN, 0.0], pa.float64()),
    )
    assert _entropies(store, path) == [0.7, None, None, 0.0]


def test_token_layout(store: Path, tmp_path: Path) -> None:
    """Rows out of order: the mean is over each sample's model tokens (masked rows ignored)."""
    rows = [  # (sample, position, model?, entropy)
        ("b", 1, 1, 0.25),
        ("a", 0, 1, 1.0),
        ("a", 2, 1, 2.5),
        ("b", 0, 0, NAN),
        ("a", 1, 0, 1e9),
        ("c", 0, 0, -3.0),
        ("b", 2, 1, 0.75),
    ]
    path = tmp_path / "tokens.parquet"
    pq.write_table(
        pa.table(
            {
                "step": [1] * len(rows),
                "sample_id": [r[0] for r in rows],
                "position": [r[1] for r in rows],
                "is_model_token": [bool(r[2]) for r in rows],
                "rollout_logprob": [-0.1] * len(rows),
                "trainer_logprob": [-0.1] * len(rows),
                "token_entropy": [r[3] for r in rows],
            }
        ),
        path,
    )
    ran = cli("ingest", str(path), "--run", "t", "-q")
    assert ran.code == 0, ran.err
    seqs = mismatchctl.open_store(store).scan("t", kind="sequences").collect().sort(S.SEQ)
    assert seqs[S.SAMPLE_ID].to_list() == ["a", "b", "c"]
    assert seqs[S.ENTROPY].to_list() == [1.75, 0.5, None]


def test_map_names_the_entropy_column(store: Path, tmp_path: Path) -> None:
    """`my_col` is not a usual name; an `entropy` column is there too and is not used."""
    path = _seq_file(
        tmp_path / "x.parquet",
        [[-0.1, -0.2]],
        [[1, 1]],
        entropy=pa.array([[9.0, 9.0]], pa.list_(pa.float64())),
        my_col=pa.array([[1.0, 0.5]], pa.list_(pa.float64())),
    )
    assert _entropies(store, path, "--map", "entropy=my_col") == [0.75]
    info = mismatchctl.open_store(store).run("r")
    assert info.sources[0].columns[S.ROLE_ENTROPY] == "my_col"


def test_absent_column_gives_null(store: Path) -> None:
    assert _entropies(store, FIXTURES / "sequence.parquet") == [None] * 5


@pytest.mark.parametrize(
    ("fmt", "files"),
    [
        ("nemo-jsonl", sorted(FIXTURES.glob("train_data_step*.jsonl"))),
        ("slime-pt", sorted(FIXTURES.glob("slime_train_*.pt"))),
    ],
)
def test_slime_and_nemo_give_null(store: Path, fmt: str, files: list[Path]) -> None:
    if fmt == "slime-pt":
        pytest.importorskip("torch")
    mismatchctl.ingest(files, run=fmt, store=store)
    seqs = mismatchctl.open_store(store).scan(fmt, kind="sequences").collect()
    assert seqs.height == 5 and seqs[S.ENTROPY].null_count() == 5


def test_length_mismatch_names_the_sample(store: Path, tmp_path: Path) -> None:
    path = _seq_file(
        tmp_path / "x.parquet",
        [[-0.1, -0.2], [-0.1, -0.2]],
        [[1, 1], [1, 0]],
        entropy=pa.array([[0.1, 0.2], [0.1, 0.2, 0.3]], pa.list_(pa.float64())),
    )
    assert _fails(store, path) == (
        f"Error: {path}: sample `s1` (row 1): rollout has 2 values, entropy has 3; "
        "1 bad sample(s) in this batch" + HINT
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-0.5, "entropy -0.5 at position 1 of a model token (expected a finite value >= -1e-06)"),
        (NAN, "entropy nan at position 1 of a model token (expected a finite value >= -1e-06)"),
        (float("inf"), "entropy inf at position 1 of a model token"),
    ],
)
def test_bad_entropy_at_a_model_token(
    store: Path, tmp_path: Path, value: float, message: str
) -> None:
    path = _seq_file(
        tmp_path / "x.parquet",
        [[-0.1, -0.2, -0.3]],
        [[1, 1, 0]],
        entropy=pa.array([[0.1, value, 0.3]], pa.list_(pa.float64())),
    )
    err = _fails(store, path)
    assert err.startswith(f"Error: {path}: sample `s0` (row 0): {message}")
    assert err.endswith("; 1 bad sample(s) in this batch" + HINT)


def test_rounding_noise_below_zero_is_accepted(store: Path, tmp_path: Path) -> None:
    path = _seq_file(
        tmp_path / "x.parquet",
        [[-0.1, -0.2]],
        [[1, 1]],
        entropy=pa.array([[-1e-7, 0.0]], pa.list_(pa.float64())),
    )
    assert _entropies(store, path) == [-5e-8]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-0.5, "entropy -0.5 of the response (expected a finite value >= -1e-06)"),
        (NAN, "entropy nan of the response"),
    ],
)
def test_bad_scalar_entropy(store: Path, tmp_path: Path, value: float, message: str) -> None:
    path = _seq_file(
        tmp_path / "x.parquet",
        [[-0.1], [-0.2]],
        [[1], [1]],
        entropy=pa.array([0.3, value], pa.float64()),
    )
    err = _fails(store, path)
    assert err.startswith(f"Error: {path}: sample `s1` (row 1): {message}")


def test_skip_bad_drops_and_counts(store: Path, tmp_path: Path) -> None:
    path = _seq_file(
        tmp_path / "x.parquet",
        [[-0.1, -0.2], [-0.1, -0.2], [-0.3], [-0.4, -0.5], [-0.6]],
        [[1, 1], [1, 1], [1], [1, 0], [1]],
        entropy=pa.array(
            [[0.5, 0.25], [0.5, -2.0], [NAN], [0.5, NAN], [0.25, 1.0]], pa.list_(pa.float64())
        ),
    )
    ran = cli("ingest", str(path), "--run", "r", "--skip-bad", "--json")
    assert ran.code == 0, ran.err
    totals = json.loads(ran.out)["totals"]
    assert totals["sequences"] == 2
    assert totals["dropped"] == {
        "entropy < -1e-06": 1,
        "entropy not finite": 1,
        "entropy length differs from rollout": 1,
    }
    assert [d.split(":")[0] for d in totals["dropped_ids"]] == ["s4", "s1", "s2"]
    assert _stored(store, "r") == [0.375, 0.5]


def test_version_1_store_is_refused(store: Path) -> None:
    assert cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "r", "-q").code == 0
    con = sqlite3.connect(store / "catalog.sqlite")
    with con:
        con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.close()
    ran = cli("runs")
    assert ran.code != 0
    assert f"the store {store} has schema version 1, this mismatchctl reads 2 or 3" in ran.err
    assert "re-ingest into a new store" in ran.err
