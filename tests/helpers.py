"""Test helpers: run the CLI, hash a store, locate fixtures."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

from mismatchctl.cli.main import app

FIXTURES = Path(__file__).parent / "data" / "fixtures"


@dataclass
class Ran:
    code: int
    out: str
    err: str


def cli(*args: str) -> Ran:
    result = CliRunner().invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Ran(result.exit_code, result.stdout, result.stderr)


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under root with the sha256 of its bytes: equal digests = byte-for-byte equal."""
    if not root.exists():
        return {}
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
