"""The sequence rows' batch_id and batch_size (from the dump's per-sequence columns, by their
usual names or --map), the token rows' entropy, and a version 2 store: read as it is, made
version 3 by the next write."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import schema as S
from tests.helpers import cli

HINT = "\n\nHint: fix the dump, or pass --skip-bad to drop bad samples (they are counted and listed).\n"


def _dump(path: Path, n: int = 70, **extra: list) -> Path:
    rng = np.random.default_rng(0)
    roll = [(-rng.exponential(1.0, 5)).tolist() for _ in range(n)]
    cols = {
        "uid": [f"s{i}" for i in range(n)],
        "rollout_log_probs": pa.array(roll, pa.list_(pa.float64())),
        "old_log_probs": pa.array(roll, pa.list_(pa.float64())),
        **extra,
    }
    pq.write_table(pa.table(cols), path)
    return path


def _seqs(store: Path, run: str = "r"):
    return mismatchctl.open_store(store).scan(run, kind="sequences").collect().sort(S.SEQ)


def test_batch_columns_by_their_usual_names(store: Path, tmp_path: Path) -> None:
    """70 distinct ids (more than an attribute keeps automatically) and their sizes."""
    ids, sizes = list(range(70)), [4] * 70
    path = _dump(tmp_path / "x.parquet", batch_id=ids, micro_batch_size=sizes)
    assert cli("ingest", str(path), "--run", "r", "-q").code == 0
    seqs = _seqs(store)
    assert seqs[S.BATCH_ID].to_list() == ids
    assert seqs[S.BATCH_SIZE].to_list() == sizes
    assert seqs["attr.batch_id"].to_list() == [str(i) for i in ids]  # attr:batch_id as before


def test_map_names_the_batch_columns(store: Path, tmp_path: Path) -> None:
    path = _dump(tmp_path / "x.parquet", n=3, mb=[7, 7, 9], width=[2, 2, 1])
    ran = cli("ingest", str(path), "--run", "r", "-q", "--map", "batch_id=mb", "--map",
              "batch_size=width")  # fmt: skip
    assert ran.code == 0, ran.err
    seqs = _seqs(store)
    assert seqs[S.BATCH_ID].to_list() == [7, 7, 9]
    assert seqs[S.BATCH_SIZE].to_list() == [2, 2, 1]


def test_without_batch_columns_they_are_null(store: Path, tmp_path: Path) -> None:
    assert cli("ingest", str(_dump(tmp_path / "x.parquet", n=2)), "--run", "r", "-q").code == 0
    seqs = _seqs(store)
    assert seqs[S.BATCH_ID].null_count() == 2 and seqs[S.BATCH_SIZE].null_count() == 2


def test_a_batch_size_that_is_no_count_is_refused(store: Path, tmp_path: Path) -> None:
    path = _dump(tmp_path / "x.parquet", n=2, batch_size=[4, 0])
    ran = cli("ingest", str(path), "--run", "r", "-q")
    assert ran.code == 1
    assert ran.err == (
        f"Error: {path}: sample `s1` (row 1): batch_size '0' (expected an integer >= 1); "
        "1 bad sample(s) in this batch" + HINT
    )


def test_a_negative_batch_id_is_refused_or_dropped(store: Path, tmp_path: Path) -> None:
    path = _dump(tmp_path / "x.parquet", n=3, batch_id=[0, -1, 2])
    ran = cli("ingest", str(path), "--run", "r", "-q")
    assert ran.code == 1
    assert ran.err == (
        f"Error: {path}: sample `s1` (row 1): batch_id '-1' (expected an integer >= 0); "
        "1 bad sample(s) in this batch" + HINT
    )
    assert cli("ingest", str(path), "--run", "r", "-q", "--skip-bad").code == 0
    assert _seqs(store)[S.BATCH_ID].to_list() == [0, 2]


@pytest.mark.parametrize(
    ("role", "usual"),
    [("batch_id", "batch_id, micro_batch_id, batch_idx"),
     ("batch_size", "batch_size, micro_batch_size")],
)  # fmt: skip
def test_map_to_a_missing_column_names_the_map(
    store: Path, tmp_path: Path, role: str, usual: str
) -> None:
    path = _dump(tmp_path / "x.parquet", n=2, mb=[1, 2])
    ran = cli("ingest", str(path), "--run", "r", "-q", "--map", f"{role}=micro")
    assert ran.code == 1
    assert ran.err == (
        f"Error: --map {role}=micro: {path} has no per-sequence scalar column `micro` "
        f"(candidates: mb)\n\nHint: name the column of one integer per sequence that holds "
        f"the {role}, or leave --map {role} out to read it from a column of a usual name "
        f"({usual}).\n"
    )
    attr = cli("ingest", str(path), "--run", "r", "-q", "--attr", "micro")  # --attr's own words
    assert attr.code == 1 and attr.err.startswith("Error: --attr micro: ")


def test_a_version_2_store_is_read_and_the_next_write_makes_it_version_3(
    store: Path, tmp_path: Path
) -> None:
    """A store as version 2 wrote it: token parts without `entropy`, sequence parts without
    the batch columns, the catalog at version 2."""
    path = _dump(tmp_path / "a.parquet", n=4, entropy=pa.array([[0.2] * 5] * 4))
    assert cli("ingest", str(path), "--run", "old", "-q").code == 0
    s = mismatchctl.open_store(store)
    for kind, drop in (("tokens", [S.TOKEN_ENTROPY]), ("sequences", [S.BATCH_ID, S.BATCH_SIZE])):
        for part in s.parts("old", kind):
            p = s.part_path(part)
            pq.write_table(pq.read_table(p).drop_columns(drop), p)
    con = sqlite3.connect(store / "catalog.sqlite")
    with con:
        con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.close()
    ran = cli("report", "old", "--by", "entropy", "--by", "batch_size", "--json", "-", "-q")
    assert ran.code == 0, ran.err
    groups = json.loads(ran.out)["groups"]
    assert [g["by"]["entropy"] for g in groups if list(g["by"]) == ["entropy"]] == [None]
    assert [g["by"]["batch_size"] for g in groups if list(g["by"]) == ["batch_size"]] == [None]
    assert mismatchctl.open_store(store).scan("old").collect()[S.TOKEN_ENTROPY].null_count() == 20
    assert cli("ingest", str(_dump(tmp_path / "b.parquet", n=2)), "--run", "new", "-q").code == 0
    con = sqlite3.connect(store / "catalog.sqlite")
    version = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    con.close()
    assert version == "3"
    assert cli("report", "old", "new", "-q", "--json", "-").code == 0
