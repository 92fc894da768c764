"""kill -9 at chosen points of an ingest and of a removal (several seeds per phase): the store
still opens, no partial run is visible, the other runs are whole, and the same ingest then
succeeds. (tests/store/test_store.py also kills a real-size ingest at wall-clock moments.)"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import mismatchctl
from tests.helpers import FIXTURES, cli, multi_gpu_dump, slow_param

ROOT = Path(__file__).resolve().parents[2]


def _killed(store: Path, point: str, n: int, *args: str) -> None:
    env = {**os.environ, "MISMATCHCTL_STORE": str(store), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "tests.crash_driver", point, str(n), *args]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]


def _committed_files(store: Path) -> set[str]:
    st = mismatchctl.open_store(store)
    kinds = ("tokens", "sequences", "masked")  # every kind these dumps make
    return {p.path for r in st.run_names() for k in kinds for p in st.parts(r, k)}


@pytest.fixture
def dump(tmp_path: Path) -> Path:
    path = tmp_path / "gpus.parquet"
    multi_gpu_dump(path)  # ~40k tokens: ~80 token parts of 500 rows under the driver
    return path


@pytest.mark.parametrize(
    ("point", "calls"), [("stage", 300), ("move", 150), ("catalog", 150)]
)  # calls: an upper bound of the calls a full ingest makes, to draw kill points from
@pytest.mark.parametrize("seed", [1, slow_param(2), slow_param(3)])
def test_killed_ingest(store: Path, dump: Path, point: str, calls: int, seed: int) -> None:
    assert cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "base", "-q").code == 0
    base = mismatchctl.report(["base"], store=store).whole().metrics
    n = random.Random(seed).randint(1, calls // 2)
    _killed(store, point, n, "ingest", str(dump), "--run", "k", "-q")
    st = mismatchctl.open_store(store)
    assert st.run_names() == ["base"]  # the killed run is not visible at all
    assert cli("runs", "check").code == 0  # leftovers are not part of any run
    assert mismatchctl.report(["base"], store=store).whole().metrics == base
    ran = cli("ingest", str(dump), "--run", "k", "-q", "--json")
    assert ran.code == 0, ran.err
    info = st.run("k")
    assert info.sequences == 360 and len(info.sources) == 1
    assert not (store / ".staging").exists()
    on_disk = {p.relative_to(store).as_posix() for p in store.rglob("*.parquet")}
    assert on_disk == _committed_files(store)  # the next write swept the orphans


@pytest.mark.parametrize("seed", [1, slow_param(2)])
def test_killed_first_ingest_leaves_an_openable_store(store: Path, dump: Path, seed: int) -> None:
    n = random.Random(seed).randint(1, 60)
    _killed(store, "move", n, "ingest", str(dump), "--run", "k", "-q")
    assert cli("runs").code == 0
    assert mismatchctl.open_store(store).run_names() == []
    assert cli("ingest", str(dump), "--run", "k", "-q").code == 0
    assert mismatchctl.open_store(store).run("k").sequences == 360


def test_killed_removal(store: Path, dump: Path) -> None:
    """`runs rm` killed after its catalog transaction, before deleting the files: the run is
    gone, its files are orphans that no run lists, and the next write removes them."""
    assert cli("ingest", str(dump), "--run", "k", "-q").code == 0
    assert cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "base", "-q").code == 0
    _killed(store, "sweep", 1, "runs", "rm", "k", "--yes")
    assert mismatchctl.open_store(store).run_names() == ["base"]
    assert (store / "tokens" / "run=k").is_dir()  # the orphans are still there...
    assert cli("runs", "check").code == 0
    assert cli("ingest", str(FIXTURES / "train_data_step3.jsonl"), "--run", "n", "-q").code == 0
    assert not (store / "tokens" / "run=k").exists()  # ...until the next write
    on_disk = {p.relative_to(store).as_posix() for p in store.rglob("*.parquet")}
    assert on_disk == _committed_files(store)
