"""The terminal report on a fixed fixture, compared with a reviewed golden file.

Regenerate after a deliberate change with ``MISMATCHCTL_UPDATE_GOLDEN=1 pytest tests/test_report_terminal.py``
and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.helpers import FIXTURES, cli

GOLDEN_DIR = Path(__file__).parent / "golden"


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
