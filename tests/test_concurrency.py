"""Two writers at once (one waits for the store lock), and a reader during a write: both ingests
land whole, the catalog stays consistent, and a report sees either the old or the new state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mismatchctl
from mismatchctl import schema as S
from tests.helpers import FIXTURES, cli, multi_gpu_dump

ROOT = Path(__file__).resolve().parent.parent
NEMO = sorted(FIXTURES.glob("train_data_step*.jsonl"))


def _start(store: Path, *args: str) -> subprocess.Popen:
    """An ingest in its own process, with tiny parts (many commits' worth of files to move)."""
    env = {**os.environ, "MISMATCHCTL_STORE": str(store), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "tests.crash_driver", "stage", "0", "ingest", *args, "--json"]
    return subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _finish(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out)


def _consistent(store: Path) -> None:
    assert cli("runs", "check").code == 0
    st = mismatchctl.open_store(store)
    for run in st.run_names():
        seqs = st.scan(run, kind="sequences").collect()
        assert seqs[S.SEQ].is_unique().all()  # sequence ids never collide
        assert st.run(run).model_tokens == st.scan(run).select(S.SEQ).collect().height


def test_two_runs_at_once(store: Path, tmp_path: Path) -> None:
    dump = tmp_path / "gpus.parquet"
    multi_gpu_dump(dump)
    a = _start(store, str(dump), "--run", "a")
    b = _start(store, *map(str, NEMO), "--run", "b")
    _finish(a)
    _finish(b)
    st = mismatchctl.open_store(store)
    assert st.run_names() == ["a", "b"]
    assert st.run("a").sequences == 360 and st.run("b").model_tokens == 21
    _consistent(store)


def test_same_file_into_one_run_at_once(store: Path, tmp_path: Path) -> None:
    dump = tmp_path / "gpus.parquet"
    multi_gpu_dump(dump)
    results = [_finish(p) for p in [_start(store, str(dump), "--run", "r") for _ in range(2)]]
    statuses = sorted(r["files"][0]["status"] for r in results)
    assert statuses == ["already ingested", "ingested"]  # the second writer saw the first commit
    info = mismatchctl.open_store(store).run("r")
    assert len(info.sources) == 1 and info.sequences == 360
    _consistent(store)


def test_different_files_into_one_run_at_once(store: Path, tmp_path: Path) -> None:
    one, two = tmp_path / "one.parquet", tmp_path / "two.parquet"
    multi_gpu_dump(one, seed=1)
    multi_gpu_dump(two, seed=2)
    procs = [_start(store, str(path), "--run", "r") for path in (one, two)]
    for proc in procs:
        _finish(proc)
    info = mismatchctl.open_store(store).run("r")
    assert len(info.sources) == 2 and info.sequences == 720
    _consistent(store)


def test_report_during_an_ingest_sees_old_or_new(store: Path, tmp_path: Path) -> None:
    assert cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "r", "-q").code == 0
    old = mismatchctl.report(store=store).whole().metrics["tokens"]
    dump = tmp_path / "gpus.parquet"
    multi_gpu_dump(dump)
    proc = _start(store, str(dump), "--run", "r")
    seen = []
    while proc.poll() is None:
        seen.append(mismatchctl.report(store=store).whole().metrics["tokens"])
    _finish(proc)
    new = mismatchctl.report(store=store).whole().metrics["tokens"]
    assert new == old + mismatchctl.open_store(store).run("r").sources[1].model_tokens
    assert set(seen) <= {old, new}, seen
