"""The store: idempotent and appending ingests, removal, crash safety, and an open layout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import schema as S
from tests.helpers import FIXTURES, cli, tree_digest

GOOD = FIXTURES / "sequence.parquet"
NEMO = sorted(FIXTURES.glob("train_data_step*.jsonl"))


def test_reingest_is_a_reported_noop(store: Path) -> None:
    assert cli("ingest", str(GOOD), "--run", "r", "-q").code == 0
    before = tree_digest(store)
    again = cli("ingest", str(GOOD), "--run", "r", "-q")
    assert again.code == 0
    assert "Nothing new for run `r`: every input is already there." in again.err
    assert "already ingested" in again.err
    assert tree_digest(store) == before


def test_same_content_twice_in_one_call(store: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.parquet"
    copy.write_bytes(GOOD.read_bytes())
    ran = cli("ingest", str(GOOD), str(copy), "--run", "r", "--json", "-q")
    files = json.loads(ran.out)["files"]
    assert [f["status"] for f in files] == ["ingested", "duplicate input"]
    assert mismatchctl.open_store(store).run("r").model_tokens == 21


def test_append_files_to_a_run(store: Path) -> None:
    assert cli("ingest", str(NEMO[0]), "--run", "r", "-q").code == 0
    assert cli("ingest", str(NEMO[1]), "--run", "r", "-q").code == 0
    info = mismatchctl.open_store(store).run("r")
    assert info.steps == [3, 4] and len(info.sources) == 2 and info.model_tokens == 21
    seqs = mismatchctl.open_store(store).scan("r", kind="sequences").collect()
    assert sorted(seqs[S.SEQ].to_list()) == [0, 1, 2, 3, 4]  # ids stay unique across appends


def test_a_store_reads_each_source_once_and_sees_every_change(store: Path) -> None:
    """One open store asked for a run again and again (``watch``): the sources read before are
    kept, the newer ones read, and a run removed and ingested again (its source with the id of
    the one removed) is read afresh."""
    opened = mismatchctl.open_store(store)
    assert cli("ingest", str(NEMO[0]), "--run", "r", "-q").code == 0
    first = opened.run("r")
    assert first.steps == [3] and len(opened._sources) == 1
    assert cli("ingest", str(NEMO[1]), "--run", "r", "-q").code == 0
    again = opened.run("r")
    assert again.steps == [3, 4] and again.sources[0] is first.sources[0]
    assert cli("runs", "rm", "r", "--yes").code == 0
    assert cli("ingest", str(GOOD), "--run", "r", "-q").code == 0
    (only,) = opened.run("r").sources
    assert only.path == str(GOOD) and only.id == first.sources[0].id


def test_runs_table_show_and_rm(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no demo store here: its hint would join the error below
    cli("ingest", str(GOOD), "--run", "a", "--tag", "gpu=H20", "-q")
    cli("ingest", *map(str, NEMO), "--run", "b", "-q")
    table = cli("runs").out
    assert "a" in table and "gpu=H20" in table and "21" in table
    listed = json.loads(cli("runs", "--json").out)
    assert [r["run"] for r in listed] == ["a", "b"]
    assert listed[0]["model_tokens"] == 21 and listed[1]["sources"] == 2
    shown = cli("runs", "show", "b")
    assert "nemo-jsonl" in shown.out and "train_data_step3.jsonl" in shown.out
    gone = cli("runs", "rm", "a", "--yes")
    assert gone.code == 0 and "Removed run `a`" in gone.err
    assert [r["run"] for r in json.loads(cli("runs", "--json").out)] == ["b"]
    assert not (store / "tokens" / "run=a").exists()
    missing = cli("runs", "show", "a")
    assert missing.code == 1
    assert missing.err == (
        f"Error: no run `a` in the store {store} (runs: b)\n\n"
        "Hint: list the runs with `mismatchctl runs`.\n"
    )


def test_runs_on_a_missing_store(store: Path) -> None:
    ran = cli("runs")
    assert ran.code == 0 and "No runs in the store" in ran.out
    assert f"No runs in the store {store} yet." in " ".join(ran.out.split())
    check = cli("runs", "check")
    assert check.code == 0 and f"No runs in the store {store} yet." in " ".join(check.out.split())


def test_commands_that_find_no_runs_name_the_store(store: Path) -> None:
    for args in (["report"], ["diagnose", "x"], ["whatif", "x"], ["compare", "x", "y"]):
        ran = cli(*args, "-q")
        assert ran.code == 1, args
        assert str(store) in ran.err.splitlines()[0], (args, ran.err)
    assert str(store) in cli("runs", "show", "x").err.splitlines()[0]


def test_an_empty_store_points_at_the_demo_store_beside_it(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After `mismatchctl demo` the runs are in ./mismatchctl-demo/store, not in the default
    store: a command that finds no runs says how to point at it."""
    here = tmp_path / "here"
    demo_store = here / "mismatchctl-demo" / "store"
    assert cli("ingest", str(GOOD), "--run", "d", "--store", str(demo_store), "-q").code == 0
    monkeypatch.chdir(here)
    hint = (
        "The demo's runs are in mismatchctl-demo/store: add --store mismatchctl-demo/store to "
        f"each command, or `export MISMATCHCTL_STORE={demo_store.resolve()}`."
    )
    for args in (["runs"], ["report", "-q"], ["diagnose", "d", "-q"], ["runs", "show", "d"]):
        ran = cli(*args)
        assert hint in " ".join((ran.out + ran.err).split()), args
    listed = cli("runs", "--store", "mismatchctl-demo/store")  # there: no hint, the run
    assert "demo's runs" not in listed.out and "│ d " in listed.out


def test_runs_rm_asks_on_a_terminal(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mismatchctl.cli import runs as runs_cmd

    assert cli("ingest", str(GOOD), "--run", "a", "-q").code == 0
    # no terminal and no --yes: refused with the fix, nothing removed, no wait for input
    ran = cli("runs", "rm", "a")
    assert ran.code == 1 and ran.err.startswith(
        "Error: `mismatchctl runs rm a` asks for confirmation, and stdin is not a terminal"
    )
    assert "Hint: add --yes to remove it without asking: mismatchctl runs rm a --yes" in ran.err
    assert mismatchctl.open_store(store).run_names() == ["a"]
    monkeypatch.setattr(runs_cmd, "_interactive", lambda: True)
    kept = cli("runs", "rm", "a", input="n\n")
    assert kept.code == 0 and "Remove run `a` (21 model tokens, 1 sources)" in kept.err
    assert "Nothing removed." in kept.err
    assert mismatchctl.open_store(store).run_names() == ["a"]
    gone = cli("runs", "rm", "a", input="y\n")
    assert gone.code == 0 and "Removed run `a`" in gone.err
    assert mismatchctl.open_store(store).run_names() == []
    missing = cli("runs", "rm", "a", input="y\n")  # an unknown run is an error before asking
    assert missing.code == 1 and "Remove run" not in missing.err
    assert missing.err.startswith("Error: no run `a` in the store")


def test_layout_is_readable_without_mismatchctl(store: Path) -> None:
    cli("ingest", str(GOOD), "--run", "a", "-q")
    cli("ingest", *map(str, NEMO), "--run", "b", "-q")
    frame = pl.scan_parquet(str(store / "tokens" / "**" / "*.parquet"), hive_partitioning=True)
    counts = frame.group_by("run").len().collect().sort("run")
    assert counts.rows() == [("a", 21), ("b", 21)]
    duckdb = pytest.importorskip("duckdb")
    sql = (
        f"SELECT run, count(*) FROM read_parquet('{store}/tokens/*/*.parquet', "
        "hive_partitioning = true) GROUP BY run ORDER BY run"
    )
    assert duckdb.sql(sql).fetchall() == [("a", 21), ("b", 21)]


def test_python_api_scan(store: Path) -> None:
    mismatchctl.ingest([GOOD], run="a", store=store)
    st = mismatchctl.open_store(store)
    assert [r.name for r in st.runs()] == ["a"]
    rows = st.scan("a").collect()
    assert rows.columns == [S.RUN, *S.TOKEN_SCHEMA.names]
    assert rows[S.RUN].unique().to_list() == ["a"]


def _big_dump(path: Path) -> Path:
    rng = np.random.default_rng(0)
    lp = (-rng.exponential(0.5, (1500, 2000))).astype(np.float32)
    table = pa.table(
        {
            "step": np.repeat(np.arange(3), 500),
            "rollout_log_probs": list(lp),
            "old_log_probs": list(lp),
        }
    )
    pq.write_table(table, path, row_group_size=100)
    return path


@pytest.mark.slow
def test_killed_ingest_leaves_no_partial_run(store: Path, tmp_path: Path) -> None:
    """SIGKILL at several moments: the run is either absent or complete, never partial."""
    cli("ingest", str(GOOD), "--run", "base", "-q")
    dump = _big_dump(tmp_path / "big.parquet")
    cmd = [sys.executable, "-m", "mismatchctl", "ingest", str(dump), "--run", "k", "-q"]
    env = {**os.environ, "MISMATCHCTL_STORE": str(store)}
    for delay in (0.3, 0.8, 1.5):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        names = [r.name for r in mismatchctl.open_store(store).runs()]
        if "k" in names:
            assert mismatchctl.open_store(store).run("k").model_tokens == 3_000_000
            assert cli("runs", "rm", "k", "--yes").code == 0
    # the next write sweeps what the killed writers left behind
    assert cli("ingest", str(NEMO[0]), "--run", "after", "-q").code == 0
    assert not (store / ".staging").exists()
    committed = {
        p.path
        for r in ("base", "after")
        for k in ("tokens", "sequences", "routing", "masked")
        for p in mismatchctl.open_store(store).parts(r, k)
    }
    on_disk = {p.relative_to(store).as_posix() for p in store.rglob("*.parquet")}
    assert on_disk == committed
