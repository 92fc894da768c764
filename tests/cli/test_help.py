"""`--help` of every command at the widths of real terminals: no option name, choice or type is
ever cut (rich's ellipsis, or a name broken across lines), and the long helps stay short enough
to read, their rules in the README and docs they point to."""

from __future__ import annotations

import re
from typing import Any

import pytest
from rich.cells import cell_len

from mismatchctl.cli.main import app
from tests.cli.test_cli import _commands
from tests.helpers import cli, slow_param

PATHS = [[], *_commands()]
# Every command's help at 80 columns: at most two screens of a 50-line terminal. Before the
# panels, `watch --help` was 232 lines and `ingest --help` 190: one line of help per option, the
# rules behind them in README.md and docs/*.md (which the help names), keep both near 90.
MAX_LINES = 100


def _command(path: list[str]) -> Any:
    import typer.main

    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return cmd


def _names(path: list[str]) -> list[str]:
    """Every option name and argument of the command, and the choices of its options."""
    out: list[str] = []
    for param in _command(path).params:
        if param.param_type_name == "argument":
            out.append(param.metavar or param.name)
            continue
        out += [*param.opts, *param.secondary_opts]
        choices = getattr(param.type, "choices", None)
        if choices:
            out.append("|".join(str(c) for c in choices))
    return out


def _whole(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


@pytest.mark.parametrize("width", [slow_param(80), 60, 40])  # 60: the narrowest of the columns
@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "mismatchctl")
def test_no_option_name_or_choice_is_cut(path: list[str], width: int, monkeypatch) -> None:
    """At 80 and 60 columns the options sit in columns (name, type, help); at 40 each help goes
    under its name (80, the roomier columns, runs with the slow tests). Either way every name
    and choice shows whole, and nothing is elided."""
    monkeypatch.setenv("COLUMNS", str(width))
    ran = cli(*path, "--help")
    assert ran.code == 0, ran.err
    assert "…" not in ran.out
    assert max(cell_len(line) for line in ran.out.splitlines()) <= width
    names = _names(path)
    assert names or path == []
    for name in names:
        assert _whole(name, ran.out), (name, width)
    if path in (["watch"], ["diagnose"]):  # an enum's choices, in the type column
        assert re.search(r"<(warn\|fail|fail\|warn)>", ran.out)


def test_cut_names_are_caught() -> None:
    """The checks above see what typer's own panel did at 80 columns."""
    cut = "│    --routes-align…                         <str>            MoE routes       │"
    assert "…" in cut and not _whole("--routes-aligned", cut)
    broken = "│ --routes-alig │\n│ ned           │"
    assert not _whole("--routes-aligned", broken)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "mismatchctl")
def test_help_fits_its_line_budget(path: list[str], monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    lines = cli(*path, "--help").out.splitlines()
    assert len(lines) <= MAX_LINES, (path, len(lines))


def test_long_helps_are_grouped_and_point_to_the_docs(monkeypatch) -> None:
    """ingest and watch: options in panels by what they are about; the rules moved to the
    README and docs, which the help names."""
    monkeypatch.setenv("COLUMNS", "80")
    panels = {
        "ingest": ["Options", "Reading the dumps", "MoE routes", "Store and engine", "Output"],
        "watch": ["Options", "Alerts", "Scanning and stopping", "Reading the dumps"],
    }
    pointers = {"ingest": ["README.md", "docs/frameworks.md"], "watch": ["docs/live.md"]}
    for command, titles in panels.items():
        text = cli(command, "--help").out
        found = re.findall(r"╭─ (.+?) ─", text)
        assert [t for t in found if t in titles] == titles, found  # each once, in this order
        for pointer in pointers[command]:
            assert pointer in text
        for line in text.splitlines():  # the examples fit: none wraps onto a second line
            if line.startswith("   mismatchctl "):
                assert cell_len(line.rstrip()) <= 79
