"""A damaged store: a deleted, truncated or replaced part is found when a command reads the run,
with an error naming the part, the run and the repair; `runs check` finds it up front."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from tests.helpers import FIXTURES, cli, multi_gpu_dump

GOOD = FIXTURES / "sequence.parquet"

HINT = (
    "\n\nHint: re-ingest the run: `mismatchctl runs rm x`, then ingest its sources again "
    "(`mismatchctl runs show x` lists them); `mismatchctl runs check` checks every run.\n"
)
COMMANDS = [
    ["report", "x", "--quiet"],
    ["compare", "x", "base", "--quiet"],
    ["diagnose", "x", "--quiet"],
    ["whatif", "x", "--quiet"],
]


@pytest.fixture
def two_runs(store: Path, tmp_path: Path) -> Path:
    dump = tmp_path / "gpus.parquet"
    multi_gpu_dump(dump)
    assert cli("ingest", str(dump), "--run", "x", "-q").code == 0
    assert cli("ingest", str(GOOD), "--run", "base", "-q").code == 0
    return store


def _part(store: Path, kind: str = "tokens"):
    return mismatchctl.open_store(store).parts("x", kind)[0]


def _fails_everywhere(store: Path, message: str) -> None:
    for command in COMMANDS:
        ran = cli(*command)
        assert ran.code == 1, command
        assert ran.err == f"Error: {message}{HINT}", command
    assert cli("report", "base", "--quiet").code == 0  # other runs stay readable


def test_deleted_token_part(two_runs: Path) -> None:
    part = _part(two_runs)
    (two_runs / part.path).unlink()
    _fails_everywhere(
        two_runs, f"part {part.path} of run `x` is missing (expected {part.rows:,} rows)"
    )


def test_deleted_sequence_part(two_runs: Path) -> None:
    part = _part(two_runs, "sequences")
    (two_runs / part.path).unlink()
    _fails_everywhere(
        two_runs, f"part {part.path} of run `x` is missing (expected {part.rows:,} rows)"
    )


def test_truncated_part(two_runs: Path) -> None:
    part = _part(two_runs)
    path = two_runs / part.path
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    for command in COMMANDS:
        ran = cli(*command)
        assert ran.code == 1
        assert ran.err.startswith(f"Error: part {part.path} of run `x` is truncated or corrupt (")
        assert ran.err.endswith(f"; expected {part.rows:,} rows){HINT}")


def test_part_replaced_by_other_rows(two_runs: Path) -> None:
    part = _part(two_runs)
    path = two_runs / part.path
    pq.write_table(pq.read_table(path).slice(0, 10), path)
    _fails_everywhere(
        two_runs, f"part {part.path} of run `x` holds 10 rows, the catalog expects {part.rows:,}"
    )


def test_runs_check_and_the_repair(two_runs: Path, tmp_path: Path) -> None:
    assert cli("runs", "check").code == 0
    part = _part(two_runs)
    (two_runs / part.path).unlink()
    ran = cli("runs", "check")
    assert ran.code == 1
    assert "damaged" in ran.out and "whole" in ran.out
    assert ran.err.startswith(f"Error: part {part.path} of run `x` is missing")
    listed = json.loads(cli("runs", "check", "--json").out)
    assert listed["base"] == [] and listed["x"][0]["part"] == part.path
    assert cli("runs", "check", "base").code == 0
    # the repair the hint names
    assert cli("runs", "rm", "x", "--yes").code == 0
    dump = tmp_path / "gpus.parquet"
    assert cli("ingest", str(dump), "--run", "x", "-q").code == 0
    assert cli("runs", "check", "--deep").code == 0
    assert cli("report", "x", "--quiet").code == 0


def test_deep_check_decodes_pages(two_runs: Path) -> None:
    part = _part(two_runs)
    path = two_runs / part.path
    data = bytearray(path.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little") + 8
    middle = (len(data) - footer) // 2
    data[middle - 2000 : middle + 2000] = b"\0" * 4000  # page bytes; the footer is intact
    path.write_bytes(bytes(data))
    assert cli("runs", "check", "x").code == 0  # the footer check cannot see inside pages
    ran = cli("runs", "check", "x", "--deep")
    assert ran.code == 1
    assert ran.err.startswith(f"Error: part {part.path} of run `x` is truncated or corrupt (")


def test_damaged_catalog(two_runs: Path) -> None:
    catalog = two_runs / "catalog.sqlite"
    catalog.write_bytes(catalog.read_bytes()[:1000])
    ran = cli("runs")
    assert ran.code == 1
    assert ran.err.startswith(f"Error: the catalog {catalog} is not a readable SQLite database")
    assert "Hint: point --store at a mismatchctl store, or move the damaged store away." in ran.err


def test_errors_keep_their_hint_across_worker_processes() -> None:
    """Parts are read in worker processes: an error raised there is pickled to the CLI."""
    import pickle

    from mismatchctl.errors import StoreError

    err = pickle.loads(pickle.dumps(StoreError("part x of run `r` is missing", "re-ingest it")))
    assert isinstance(err, StoreError)
    assert (err.message, err.hint) == ("part x of run `r` is missing", "re-ingest it")


def test_a_selection_of_some_steps_checks_the_parts_it_reads(store: Path, tmp_path: Path) -> None:
    """A run of two files (steps 0-1, steps 2-3): a selection of steps 0-1 reads and checks the
    first file's parts only, so a damaged part of steps 2-3 fails the whole run's report and
    not the report of steps 0-1 (a watched run's new step reads its own parts)."""
    from tests.planted import Plan, write

    for k in range(2):
        dump = write(Plan("clean", steps=2, per_step=8, seed=k), tmp_path / f"s{k}.parquet")
        table = pq.read_table(dump)
        pq.write_table(
            table.set_column(0, "step", pa.array([s + 2 * k for s in table["step"].to_pylist()])),
            dump,
        )
        assert cli("ingest", str(dump), "--run", "y", "-q").code == 0
    parts = mismatchctl.open_store(store).parts("y", "sequences")
    late = next(p for p in parts if p.min_step == 2)
    (store / late.path).unlink()
    assert cli("report", "y@steps=0..1", "--quiet").code == 0
    ran = cli("report", "y", "--quiet")
    assert ran.code == 1 and f"part {late.path} of run `y` is missing" in ran.err
    ran = cli("report", "y@steps=1..2", "--quiet")
    assert ran.code == 1 and f"part {late.path} of run `y` is missing" in ran.err
