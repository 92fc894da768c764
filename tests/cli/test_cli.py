"""The command line as a user meets it: help everywhere, fast startup without torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mismatchctl.cli.main import app
from tests.helpers import cli


def _commands() -> list[list[str]]:
    import typer.main

    group = typer.main.get_command(app)
    paths: list[list[str]] = []

    def walk(cmd, prefix: list[str]) -> None:
        for name, sub in getattr(cmd, "commands", {}).items():
            paths.append([*prefix, name])
            walk(sub, [*prefix, name])

    walk(group, [])
    return paths


@pytest.mark.parametrize("path", _commands(), ids=lambda p: " ".join(p))
def test_every_command_has_help_with_an_example(path: list[str]) -> None:
    ran = cli(*path, "--help")
    assert ran.code == 0
    assert "mismatchctl " + path[0] in ran.out  # an example invocation
    assert len(ran.out.strip().splitlines()) > 5


def test_every_command_is_documented_in_the_readme() -> None:
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    for path in _commands():
        assert f"mismatchctl {' '.join(path)}" in readme, path


def test_readme_exit_codes_are_whole_sentences() -> None:
    """README "Exit codes": every command that can exit 3 is named once in the sentence of `3`,
    and the prose has no stray fragment (an unbalanced parenthesis or backtick)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    for paragraph in section.strip().split("\n\n"):
        assert paragraph.count("(") == paragraph.count(")"), paragraph
        assert paragraph.count("`") % 2 == 0, paragraph
    three = section.split("; `3` ", 1)[1].split("\n\n", 1)[0]
    for command in ("diagnose", "check", "watch", "certify"):
        assert len(re.findall(f"`mismatchctl {command}[` ]", three)) == 1, command


def test_version() -> None:
    ran = cli("--version")
    assert ran.code == 0 and ran.out.startswith("mismatchctl ")


def test_help_does_not_import_torch() -> None:
    code = (
        "import sys\n"
        "from mismatchctl.cli.main import app\n"
        "try:\n"
        "    app(['ingest', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_no_color_is_respected(store) -> None:  # the store fixture sets NO_COLOR=1
    ran = cli("runs", "show", "missing")
    assert "\x1b[" not in ran.err


def test_progress_bars_on_a_terminal(store, tmp_path, monkeypatch) -> None:
    """With a terminal on stderr the progress bars are live: every long command must render them."""
    from tests.helpers import FIXTURES

    monkeypatch.setenv("FORCE_COLOR", "1")  # rich then treats the output as a terminal
    seq = str(FIXTURES / "sequence.parquet")
    for args in (
        ["ingest", seq, "--run", "a"],
        ["ingest", str(FIXTURES / "golden.parquet"), "--run", "b"],
        ["report", "--by-gpu"],
        ["report", "--diagnose", "--html", str(tmp_path / "r.html")],
        ["compare", "a", "b", "--resamples", "20"],
        ["diagnose", "a"],
        ["whatif", "a"],
    ):
        ran = cli(*args)
        assert ran.code in (0, 3), (args, ran.err)


def test_report_says_its_phases_on_a_pipe(store, tmp_path) -> None:
    """`report --diagnose --html` (several long phases): one line per phase on stderr, the same
    stdout as with -q; a plain report stays silent on a pipe (one phase, as a bar would)."""
    from mismatchctl import api
    from tests.helpers import FIXTURES

    for run, name in (("a", "sequence.parquet"), ("b", "golden.parquet")):
        assert cli("ingest", str(FIXTURES / name), "--run", run, "-q").code == 0
    tokens = sum(info.model_tokens for info in api.runs(store))
    page = tmp_path / "r.html"
    ran = cli("report", "--diagnose", "--html", str(page))
    assert ran.code == 0, ran.err
    assert ran.err.splitlines() == [
        f"reading {tokens:,} tokens of 2 runs",
        "diagnosing 2 runs",
        "writing the HTML report",
        f"Wrote {page}",
    ]
    quiet = cli("report", "--diagnose", "--html", str(page), "-q")
    assert quiet.out == ran.out and quiet.err == f"Wrote {page}\n"
    plain = cli("report")
    assert plain.code == 0 and plain.err == ""
    html = cli("report", "--html", str(page))  # the page is a second phase
    assert html.err.splitlines() == [
        f"reading {tokens:,} tokens of 2 runs",
        "writing the HTML report",
        f"Wrote {page}",
    ]


def test_option_help_keeps_its_defaults() -> None:
    """Help texts are rich markup: a `[default: ...]` in them vanished; they use parentheses."""
    from tests.helpers import cli

    text = " ".join(cli("report", "--help").out.replace("│", " ").split())
    assert "(default: $MISMATCHCTL_STORE" in text
    assert "(default: $RAY_ADDRESS" in text


def test_an_empty_selection_is_the_same_error_everywhere(store, tmp_path) -> None:
    """README "Exit codes": a selection without model tokens is exit code 1 with a message
    saying what was selected and what exists, for every command, with nothing on stdout."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.helpers import FIXTURES

    assert cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "a", "-q").code == 0
    masked = tmp_path / "masked.parquet"  # every token masked: a run without model tokens
    pq.write_table(
        pa.table(
            {
                "step": [0, 0],
                "uid": ["x", "y"],
                "rollout_log_probs": [[-0.1, -0.2], [-0.3]],
                "old_log_probs": [[-0.1, -0.2], [-0.3]],
                "response_mask": [[0, 0], [0]],
            }
        ),
        masked,
    )
    assert cli("ingest", str(masked), "--run", "e", "--tag", "kind=masked", "-q").code == 0
    cases = {
        ("report", "a", "--steps", "100..200"): "the selection (a; steps 100..200) matches no "
        "model tokens (run a holds steps 3..4)",
        ("report", "a", "--steps", "100..200", "--json", "-"): "the selection (a; steps",
        ("report", "e"): "the selection (e) matches no model tokens",
        ("compare", "a@steps=100..200", "a"): "selector `a@steps=100..200` matches no model "
        "tokens (run a holds steps 3..4)",
        ("diagnose", "a@steps=..2"): "selector `a@steps=..2` matches no model tokens",
        ("diagnose", "kind=masked"): "selector `kind=masked` matches no model tokens",
        ("whatif", "a@steps=5.."): "selector `a@steps=5..` matches no model tokens",
        ("whatif", "e"): "selector `e` matches no model tokens",
    }
    for args, message in cases.items():
        ran = cli(*args, "-q")
        assert ran.code == 1, (args, ran.code, ran.out)
        assert ran.out == "", args
        assert ran.err.startswith(f"Error: {message}"), (args, ran.err)
        assert "Hint: widen the selection" in ran.err, args
