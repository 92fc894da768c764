"""The terminal report on a fixed fixture, compared with a reviewed golden file.

Regenerate after a deliberate change with ``MISMATCHCTL_UPDATE_GOLDEN=1 pytest tests/render/test_report_terminal.py``
and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rich.cells import cell_len

from tests.helpers import FIXTURES, cli, multi_gpu_dump, slow_param, step_dump

GOLDEN_DIR = Path(__file__).parents[1] / "golden"


def _check(name: str, text: str) -> None:
    path = GOLDEN_DIR / name
    if os.environ.get("MISMATCHCTL_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_terminal_report_golden(store: Path) -> None:
    cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "seq", "--tag", "gpu=H20", "-q")
    ran = cli("report", "seq", "--by-gpu", "-q")
    assert ran.code == 0, ran.err
    _check("report_seq_by_gpu.txt", ran.out)


def test_terminal_report_two_runs_golden(store: Path) -> None:
    cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "a", "-q")
    cli("ingest", str(FIXTURES / "golden.parquet"), "--run", "b", "-q")
    ran = cli("report", "--by", "step,turn_kind", "-q")
    assert ran.code == 0, ran.err
    _check("report_two_runs.txt", ran.out)


def _step_rows(text: str, step: int) -> int:
    """Table rows whose first cell is ``step``."""
    return sum(1 for line in text.splitlines() if line.startswith(f"│ {step:>4} │"))


def test_by_step_of_one_run_prints_one_step_table(store: Path, tmp_path: Path) -> None:
    cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "seq", "-q")
    ran = cli("report", "seq", "--by", "step", "-q")
    assert ran.code == 0, ran.err
    assert ran.out.count("Per step: seq") == 1 and "By step" not in ran.out
    assert _step_rows(ran.out, 3) == 1 and _step_rows(ran.out, 4) == 1
    # a long run: the per-step table shows its worst steps, and every step with --by step
    cli("ingest", str(step_dump(tmp_path / "long.parquet", list(range(40)))), "--run", "long", "-q")
    worst = cli("report", "long", "-q").out
    assert "Worst 10 steps: long" in worst and _step_rows(worst, 0) == 0
    every = cli("report", "long", "--by", "step", "-q").out
    assert "Worst 10" not in every and "By step" not in every
    assert all(_step_rows(every, s) == 1 for s in range(40))
    # with two runs, --by step pools them per step: a table of its own
    both = cli("report", "--by", "step", "-q").out
    assert "By step" in both and "vllm_kl per step, per run" in both


@pytest.mark.parametrize("columns", [slow_param(80), 60])
def test_narrow_terminals_never_elide_a_number(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    """A table wider than the terminal is split into tables with fewer columns: no cell is cut
    to "1.3…", no line is wider than the terminal, and the band column keeps the severe share."""
    dump = tmp_path / "gpus.parquet"
    multi_gpu_dump(dump)
    cli("ingest", str(dump), "--run", "g", "-q")
    cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "seq", "-q")
    doc = json.loads(cli("report", "--by-gpu", "--json", "-", "-q").out)
    monkeypatch.setenv("COLUMNS", str(columns))
    for command in (
        ["report", "--by-gpu"],
        ["report", "g", "--by", "step,turn_kind"],
        ["compare", "g", "seq", "--resamples", "50"],
        ["diagnose", "g"],
        ["whatif", "g"],
    ):
        ran = cli(*command)
        assert ran.code in (0, 3), (command, ran.err)
        assert "…" not in ran.out, (command, columns)
        assert max(cell_len(line) for line in ran.out.splitlines()) <= columns, command
        if command == ["report", "--by-gpu"]:
            for row in doc["hardware"]:
                shares = "/".join(
                    f"{100 * row[f'band_share_{b}']:.1f}%"
                    for b in ("low", "medium", "high", "severe")
                )
                assert shares in ran.out, (row["gpu"], shares)
            assert "By hardware" in ran.out and "(continued)" in ran.out
