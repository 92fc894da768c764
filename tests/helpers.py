"""Test helpers: run the CLI, hash a store, locate fixtures."""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.main import get_command
from typer.testing import CliRunner

from mismatchctl.cli.main import app

FIXTURES = Path(__file__).parent / "data" / "fixtures"
EVIL = '<script>alert("x")</script>'  # a user string that must come out escaped


# the slow tests run (tests/conftest.py skips them otherwise)
SLOW = os.environ.get("MISMATCHCTL_SLOW_TESTS") == "1"


def slow_param(*values: object, **kwargs: object) -> object:
    """A parameter run with the slow tests only (CI): the README's suite keeps one per family."""
    return pytest.param(*values, marks=pytest.mark.slow, **kwargs)  # type: ignore[arg-type]


def examples(n: int) -> int:
    """A property test's examples: ``n`` with the slow tests (CI), half of them in the README's
    suite (its CPU budget), never fewer than 10."""
    return n if SLOW else max(10, n // 2)


@dataclass
class Ran:
    code: int
    out: str
    err: str


# the CLI's command, built from the typer app once per process as `mismatchctl` builds it once
# per run: typer's ``CliRunner.invoke`` builds it again on every call (about 25 ms of CPU each,
# a fifth of the CPU of the modules that call the CLI most)
COMMAND = get_command(app)


def cli(*args: str, input: str | None = None) -> Ran:
    """The CLI in this process (``CliRunner.invoke``'s isolation, on ``COMMAND``): its exit code,
    stdout and stderr; an exception other than ``SystemExit`` is raised here."""
    runner = CliRunner()
    with runner.isolation(input=input) as (out, err, _):
        try:
            COMMAND.main(args=list(args), prog_name=runner.get_default_prog_name(COMMAND))
            code = 0
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:  # as CliRunner.invoke: a message as the exit's code is printed, and exits 1
                sys.stdout.write(f"{stop.code}\n")
                code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        written = out.getvalue(), err.getvalue()
    return Ran(code, *(b.decode(runner.charset, "replace").replace("\r\n", "\n") for b in written))


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under root with the sha256 of its bytes: equal digests = byte-for-byte equal."""
    if not root.exists():
        return {}
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def multi_gpu_dump(path: Path, seed: int = 5) -> None:
    """12 steps x 30 responses on three gpus (one named with markup, for escaping tests),
    mismatch growing with the step and on A100."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {
        k: [] for k in ("step", "uid", "gpu", "rollout_log_probs", "old_log_probs", "response_mask")
    }
    for step in range(12):
        for i in range(30):
            gpu = ("H20", "A100", f"L20{EVIL}")[i % 3]
            n = int(rng.integers(20, 200))
            mask = np.ones(n, dtype=np.int8)
            mask[n // 2 : n // 2 + 5] = 0
            lr = -rng.exponential(1.0, n)
            noise = 0.01 * (1 + 10 * (gpu == "A100")) * (1 + step / 4) * (1 + np.sqrt(-lr))
            lt = np.minimum(lr + rng.normal(0, 1, n) * noise, 0.0)
            for key, value in zip(
                rows,
                (step, f"{step}-{i}", gpu, lr.tolist(), lt.tolist(), mask.tolist()),
                strict=True,
            ):
                rows[key].append(value)
    table = pa.table(
        {**rows, "response_mask": pa.array(rows["response_mask"], pa.list_(pa.int8()))}
    )
    pq.write_table(table, path)


def step_dump(path: Path, steps: list[int], seed: int = 3, per_step: int = 4) -> Path:
    """``per_step`` short responses at each of ``steps`` (any integers, negative ones included),
    mismatch growing with the position in ``steps``."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {k: [] for k in ("step", "uid", "rollout_log_probs", "old_log_probs")}
    for k, step in enumerate(steps):
        for i in range(per_step):
            lr = -rng.exponential(1.0, 6)
            lt = np.minimum(lr + rng.normal(0, 0.01 * (1 + k), 6), 0.0)
            for key, value in zip(
                rows, (step, f"{step}-{i}", lr.tolist(), lt.tolist()), strict=True
            ):
                rows[key].append(value)
    pq.write_table(pa.table(rows), path)
    return path
