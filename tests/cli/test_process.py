"""The command-line process (``cli/process.py``): its output is whole and its status right
although it exits without the interpreter's teardown; the exit handlers run; the cyclic
garbage collector is held off at start-up, then frozen out of the libraries' objects and back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mismatchctl import api
from mismatchctl.cli.process import ONE_BLAS_THREAD, exit_code
from tests.helpers import FIXTURES

ROOT = Path(__file__).parents[2]


def _python(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout
    )


def test_a_piped_json_is_whole(tmp_path: Path) -> None:
    store = tmp_path / "store"
    api.ingest([FIXTURES / "golden.parquet"], "g", store=store)
    done = _python("-m", "mismatchctl", "report", "g", "--json", "-", "-q", "--store", str(store))
    assert done.returncode == 0, done.stderr
    assert len(done.stdout) > 10_000  # more than a pipe's first buffer
    report = json.loads(done.stdout)
    assert report["groups"], "the report's groups"


def test_a_failed_command_keeps_its_status_and_message(tmp_path: Path) -> None:
    store = tmp_path / "store"
    api.ingest([FIXTURES / "golden.parquet"], "g", store=store)
    done = _python("-m", "mismatchctl", "report", "no-such-run", "--store", str(store))
    assert done.returncode not in (0, None)
    assert "no-such-run" in done.stderr
    usage = _python("-m", "mismatchctl", "report", "--no-such-option")
    assert usage.returncode == 2
    assert "No such option" in usage.stderr


def test_exit_handlers_run_and_buffers_are_flushed() -> None:
    code = (
        "import atexit, sys\n"
        "from mismatchctl.cli.process import exit_now\n"
        "atexit.register(lambda: print('handler ran'))\n"
        "sys.stdout.write('unflushed ')\n"
        "exit_now(4)\n"
        "print('not reached')\n"
    )
    done = _python("-c", code)
    assert done.returncode == 4
    assert done.stdout == "unflushed handler ran\n"


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (3, 3), ("a message", 1)])
def test_exit_code_is_that_of_sys_exit(
    code: object, status: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_code(code) == status
    assert capsys.readouterr().err == ("a message\n" if isinstance(code, str) else "")


def test_the_collector_is_held_then_frozen_and_back() -> None:
    code = (
        "import gc, time\n"
        "from mismatchctl.cli.process import hold_gc\n"
        "hold_gc(0.3)\n"
        "assert not gc.isenabled()\n"
        "held = [[i] for i in range(1000)]\n"
        "deadline = time.monotonic() + 30\n"
        "while not gc.isenabled() and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "assert gc.isenabled(), 'the collector is back'\n"
        "assert gc.get_freeze_count() >= 1000, gc.get_freeze_count()\n"
    )
    done = _python("-c", code)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("preset", "seen"), [(None, "1"), ("3", "3")])
def test_blas_runs_on_the_calling_thread_unless_told(preset: str | None, seen: str) -> None:
    """The command sets one BLAS thread before numpy loads; a value the user set is kept."""
    code = (
        "import atexit, os, sys\n"
        "atexit.register(lambda: print(os.environ.get('OPENBLAS_NUM_THREADS'),"
        " os.environ.get('MKL_NUM_THREADS')))\n"
        "sys.argv = ['mismatchctl', 'runs', '--help']\n"
        "from mismatchctl.cli.process import main\n"
        "assert 'numpy' not in sys.modules\n"
        "main()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ONE_BLAS_THREAD}
    if preset is not None:
        env["OPENBLAS_NUM_THREADS"] = preset
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"{seen} 1"
