"""Two writers at once (one waits for the store lock), and a reader during a write: both ingests
land whole, the catalog stays consistent, and a report sees either the old or the new state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mismatchctl
from mismatchctl import schema as S
from tests.helpers import FIXTURES, cli, multi_gpu_dump, step_dump

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.fixture
def three(store: Path, tmp_path: Path) -> Path:
    for seed, run in enumerate(("a", "b", "c")):
        path = step_dump(tmp_path / f"{run}.parquet", [0, 1, 2], seed=seed)
        assert cli("ingest", str(path), "--run", run, "--tag", "kind=x", "-q").code == 0
    return store


def _remove_c_when(store: Path, monkeypatch: pytest.MonkeyPatch, module, name: str) -> None:
    """`runs rm c` lands when ``module.name`` first touches run c (a deterministic race)."""
    real = getattr(module, name)
    done: list[bool] = []

    def racing(*args, **kwargs):
        run = args[1] if name == "check_run" else args[0].run  # (store, run) or (task, ...)
        if run == "c" and not done:
            done.append(True)
            mismatchctl.open_store(store).remove("c")  # what `mismatchctl runs rm c` does
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, racing)


def _groups(doc: dict) -> list:
    return [(g["by"], g["metrics"]) for g in doc["groups"]]


@pytest.mark.parametrize("phase", ["while its parts are read", "before its parts are listed"])
def test_a_run_removed_during_a_report_of_every_run(
    three: Path, monkeypatch: pytest.MonkeyPatch, phase: str
) -> None:
    """The report of every run is the report of the runs that remain; never "damaged"."""
    from mismatchctl.analysis import selection
    from mismatchctl.engines import local as local_engine

    expected = json.loads(cli("report", "a", "b", "--json", "-", "-q").out)
    if phase == "while its parts are read":
        _remove_c_when(three, monkeypatch, local_engine, "part_groups")
    else:
        _remove_c_when(three, monkeypatch, selection, "check_run")
    ran = cli("report", "--json", "-", "-q", "--workers", "1")
    assert ran.code == 0, ran.err
    doc = json.loads(ran.out)
    assert sorted(doc["runs"]) == ["a", "b"]
    assert _groups(doc) == _groups(expected)


def test_a_run_removed_during_a_command_on_other_runs(
    three: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mismatchctl.engines import local as local_engine

    _remove_c_when(three, monkeypatch, local_engine, "part_groups")
    ran = cli("diagnose", "kind=x", "--json", "-", "-q", "--workers", "1")  # every run, by tag
    assert ran.code in (0, 3), ran.err
    assert sorted(json.loads(ran.out)["runs"]) == ["a", "b"]


@pytest.mark.parametrize(
    "command",
    [
        ["report", "a", "c"],
        ["diagnose", "c"],
        ["whatif", "c"],
        ["explain", "c"],
        ["explain", "c@steps=2", "--baseline", "c@steps=0..1"],
        ["tokens", "c"],
        ["certify", "c"],
    ],
)
def test_a_named_run_removed_while_it_is_read(
    three: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    from mismatchctl.engines import local as local_engine

    _remove_c_when(three, monkeypatch, local_engine, "part_groups")
    ran = cli(*command, "-q", "--workers", "1")
    assert ran.code == 1 and ran.out == ""
    assert ran.err.startswith("Error: run `c` was removed while it was being read"), ran.err
    assert "Hint: run the command again" in ran.err
    assert "damaged" not in ran.err and "re-ingest" not in ran.err and "corrupt" not in ran.err
