"""Step ranges: every stored step, negative ones included, can be selected with `--steps` and
`@steps=`; a range the older syntax read differently is refused, never reinterpreted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mismatchctl.analysis.selectors import parse_steps
from mismatchctl.engines.plan import StepRange
from mismatchctl.errors import UsageError
from tests.helpers import cli, step_dump

STEPS = [-6, -5, -4, 0, 1, 7]


@pytest.fixture
def negative(store: Path, tmp_path: Path) -> Path:
    path = step_dump(tmp_path / "neg.parquet", STEPS)
    assert cli("ingest", str(path), "--run", "neg", "-q").code == 0
    return store


def _steps(*args: str) -> list[int]:
    ran = cli("report", "neg", *args, "--json", "-", "-q")
    assert ran.code == 0, ran.err
    return json.loads(ran.out)["runs"]["neg"]["steps"]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("-6..-5", [-6, -5]),
        ("..-5", [-6, -5]),
        ("-4..", [-4, 0, 1, 7]),
        ("-4..-4", [-4]),
        ("-5..0", [-5, -4, 0]),
        (" -6 .. 1 ", [-6, -5, -4, 0, 1]),
        ("..1", [-6, -5, -4, 0, 1]),
        ("0..", [0, 1, 7]),
        ("0-1", [0, 1]),  # the older syntax, for steps >= 0
        ("1-", [1, 7]),
        ("7", [7]),
    ],
)
def test_every_stored_step_is_selectable(negative: Path, text: str, want: list[int]) -> None:
    assert _steps(f"--steps={text}") == want


def test_a_negative_range_as_a_separate_argument(negative: Path) -> None:
    assert _steps("--steps", "-6..-5") == [-6, -5]


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        # the older syntax read `-6` as "up to 6": it must not silently change meaning
        ("-6", "step range `-6` is ambiguous", "write -6..-6 for step -6 alone, or ..6 for"),
        ("-6--5", "step range `-6--5` is not understood", "e.g. -6..-5"),
        ("-6-5", "step range `-6-5` is not understood", "A.. or ..B"),
        ("..", "step range `..` names no step", "A..B"),
        ("-5..-6", "step range `-5..-6` is empty (-5 > -6)", "A <= B"),
        ("a..b", "step range `a..b` is not understood", "A..B"),
    ],
)
def test_ambiguous_or_malformed_ranges_are_refused(
    negative: Path, text: str, message: str, hint: str
) -> None:
    ran = cli("report", "neg", f"--steps={text}", "-q")
    assert ran.code == 1 and ran.out == ""
    assert ran.err.startswith(f"Error: {message}"), ran.err
    assert "Hint: " in ran.err and hint in " ".join(ran.err.split())


def test_selectors_take_the_same_syntax(negative: Path) -> None:
    ran = cli("diagnose", "neg@steps=-6..-5", "--json", "-", "-q")
    assert ran.code in (0, 3), ran.err
    assert json.loads(ran.out)["runs"]["neg"]["steps"] == [-6, -5]
    ran = cli("whatif", "neg@steps=..-5", "--json", "-", "-q")
    assert ran.code == 0, ran.err
    assert json.loads(ran.out)["runs"]["neg"]["steps"] == [-6, -5]
    ran = cli("compare", "neg@steps=-6..-4", "neg@steps=0..", "--json", "-", "-q")
    assert ran.code == 0, ran.err
    doc = json.loads(ran.out)["comparison"]
    assert [s["step"] for s in doc["steps"]] == [-6, -5, -4, 0, 1, 7]
    bad = cli("diagnose", "neg@steps=-6", "-q")
    assert bad.code == 1 and "step range `-6` is ambiguous" in bad.err


def test_ranges_are_shown_as_they_are_read_back(negative: Path) -> None:
    ran = cli("report", "neg", "--steps=-6..-5", "-q")
    assert ran.out.startswith("Run neg, steps -6..-5\n")
    doc = json.loads(cli("report", "neg", "--steps=-6..-5", "--json", "-", "-q").out)
    assert doc["step_range"] == "-6..-5"
    runs = cli("runs").out
    assert "6 (-6..7)" in runs
    for text in ("-6..-5", "..-5", "3..", "0..200", "42", "-1..-1", "..0"):
        assert str(parse_steps(text)) == text.replace(" ", "")
        assert parse_steps(str(parse_steps(text))) == parse_steps(text)


def test_older_forms_keep_their_meaning() -> None:
    assert parse_steps("0-200") == StepRange(0, 200)
    assert parse_steps("150-") == StepRange(150, None)
    assert parse_steps("42") == StepRange(42, 42)
    with pytest.raises(UsageError):
        parse_steps("-99")  # was "up to 99": refused rather than read as step -99
