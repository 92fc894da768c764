"""One selector grammar for every command that reads a selection: `RUN@steps=A..B` gives each
command the numbers `report RUN --steps A..B` gives; a near miss (`@step=`, `@1..3`, `a..b`, a
misspelt run) is an error naming the grammar and the selector meant; the commands that read a
whole run refuse part of one, saying how to name it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mismatchctl.analysis.selectors import combine, parse_selector, selector_text
from mismatchctl.engines.plan import StepRange
from mismatchctl.errors import UsageError
from tests.helpers import cli, slow_param, step_dump, tree_digest

GRAMMAR = "selectors: RUN[@steps=A..B] or KEY=VALUE"


def _write_two(store: Path, tmp: Path) -> Path:
    for name, gpu, seed in (("ref", "H20", 3), ("other", "A100", 4)):
        dump = step_dump(tmp / f"{name}.parquet", list(range(6)), seed=seed, per_step=8)
        ran = cli("ingest", str(dump), "--run", name, "--tag", f"gpu={gpu}", "--store", str(store))
        assert ran.code == 0, ran.err
    return store


@pytest.fixture
def two(store: Path, tmp_path: Path) -> Path:
    """`ref` (gpu H20) and `other` (gpu A100), steps 0-5, 8 responses a step."""
    return _write_two(store, tmp_path)


@pytest.fixture(scope="module")
def two_written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("two")
    return _write_two(root / "store", root)


@pytest.fixture
def two_read(store: Path, two_written: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`two`, written once for the tests that only read it (an error writes nothing): the
    store of each test is set to it."""
    monkeypatch.setenv("MISMATCHCTL_STORE", str(two_written))
    return two_written


def _json(*args: str) -> Any:
    ran = cli(*args, "--json", "-", "-q")
    assert ran.code in (0, 3), ran.err
    return json.loads(ran.out)


def _whole(doc: dict) -> dict:
    """The report's whole-selection group (the split without keys)."""
    return next(g["metrics"] for g in doc["groups"] if not g["by"])


def _reference(run: str = "ref", steps: str = "1..3") -> tuple[int, float]:
    return _report(_json("report", run, "--steps", steps))


def test_report_takes_the_selectors_of_the_other_commands(two: Path) -> None:
    want = _json("report", "ref", "--steps", "1..3")
    for args in (("ref@steps=1..3",), ("ref@steps=1-3",), ("run=ref@steps=1..3",),
                 ("ref@steps=1..3", "--steps", "1..3"), ("gpu=H20@steps=1..3",)):  # fmt: skip
        got = _json("report", *args)
        assert got["runs"] == want["runs"] and got["groups"] == want["groups"], args
    both = _json("report", "ref", "other", "--steps", "2..")
    assert _json("report", "ref@steps=2..", "other@steps=2..")["groups"] == both["groups"]
    assert sorted(both["runs"]) == ["other", "ref"] and both["runs"]["ref"]["steps"] == [2, 3, 4, 5]


def test_report_diagnoses_the_slice_it_reports(two_read: Path) -> None:
    doc = _json("report", "ref@steps=1..3", "--diagnose")
    assert list(doc["diagnosis"]) == ["ref@steps=1..3"]
    assert doc["diagnosis"]["ref@steps=1..3"]["selection"] == "ref@steps=1..3"


def _report(doc: dict) -> tuple[int, float]:
    metrics = _whole(doc)
    return metrics["tokens"], metrics["vllm_kl"]


def _compare(doc: dict) -> tuple[int, float]:
    head = {m["metric"]: m["a"] for m in doc["comparison"]["headline"]}
    return head["tokens"], head["vllm_kl"]


def _explain(doc: dict) -> tuple[int, float]:
    return doc["explain"]["tokens"], doc["explain"]["vllm_kl"]


def _tokens(doc: dict) -> tuple[int, float]:
    t = doc["tokens"]
    return t["cell_tokens"], t["cell_k3_sum"] / t["cell_tokens"]


def _check(doc: dict) -> tuple[int | None, float]:
    values = {c["metric"]: c["value"] for c in doc["check"]["thresholds"]}
    return int(values["tokens"]), values["vllm_kl"]


# each command that reads a selection, and where its JSON says the selection's tokens and vllm_kl
COMMANDS = {
    "compare": (("compare", "ref@steps=1..3", "other"), _compare),
    "explain": (("explain", "ref@steps=1..3"), _explain),
    "diagnose": (("diagnose", "ref@steps=1..3"), _report),
    "tokens": (("tokens", "ref@steps=1..3", "--top", "1000"), _tokens),
    "whatif": (("whatif", "ref@steps=1..3"), _report),
    "check": (("check", "ref@steps=1..3", "--min", "tokens=1"), _check),
    "certify": (("certify", "ref@steps=1..3"), lambda d: (d["certify"]["tokens"], None)),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_reads_the_steps_report_reads(two: Path, command: str) -> None:
    args, numbers = COMMANDS[command]
    tokens, kl = numbers(_json(*args))
    want_tokens, want_kl = _reference()
    assert tokens == want_tokens
    if kl is not None:
        assert kl == pytest.approx(want_kl, rel=1e-12)


def test_a_baseline_takes_the_same_grammar(two: Path) -> None:
    doc = _json("explain", "ref@steps=4..", "--baseline", "ref@steps=1..3")["explain"]
    tokens, kl = _reference()
    assert doc["baseline_tokens"] == tokens
    assert doc["baseline_vllm_kl"] == pytest.approx(kl, rel=1e-12)
    diagnosed = _json("diagnose", "ref@steps=4..", "--baseline", "ref@steps=1..3")
    assert diagnosed["diagnosis"]["baseline"] == "ref@steps=1..3"
    for command in ("explain", "diagnose"):
        ran = cli(command, "ref@steps=4..", "--baseline", "ref@step=1..3", "-q")
        assert ran.code == 1 and "Hint: did you mean `ref@steps=1..3`?" in ran.err


NEAR_MISSES = {
    "ref@step=1..3": ("`@step=1..3` is not a step range", "did you mean `ref@steps=1..3`?"),
    "ref@Steps=1..3": ("`@Steps=1..3` is not a step range", "did you mean `ref@steps=1..3`?"),
    "ref@1..3": ("`@1..3` is not a step range", "did you mean `ref@steps=1..3`?"),
    "ref@steps:2": ("`@steps:2` is not a step range", "did you mean `ref@steps=2`?"),
    "ref@steps=a..b": ("step range `a..b` is not understood", "write A..B"),
    "ref@color=red": ("`@color=red` is not a step range", "the only modifier is @steps=A..B"),
    "rfe@steps=1..3": ("no run `rfe` in the store", "did you mean `ref`?"),
    "ref,gpu=H20": ("`ref` is not KEY=VALUE", "write run=ref for a run among KEY=VALUE"),
    "ref,other": ("names several runs (`ref`, `other`)", "report A B"),
    "ref=1..3": ("no source has a tag `ref`", "did you mean `ref@steps=1..3`?"),
}


def _near_misses() -> list[Any]:
    """Every near miss on `report` and every command on the first near miss; the other pairs
    (the same check again) run with the slow tests (CI)."""
    first = sorted(NEAR_MISSES)[0]
    return [
        (text, command) if command == "report" or text == first else slow_param(text, command)
        for text in sorted(NEAR_MISSES)
        for command in ["report", *sorted(COMMANDS)]
    ]


@pytest.mark.parametrize(("text", "command"), _near_misses())
def test_near_misses_name_the_grammar(two_read: Path, command: str, text: str) -> None:
    message, hint = NEAR_MISSES[text]
    args = (command, text, "other") if command == "compare" else (command, text)
    ran = cli(*args, "-q")
    assert ran.code == 1 and ran.out == ""
    error, _, rest = ran.err.partition("\n\nHint: ")
    assert error.startswith("Error: ") and message in error, ran.err
    assert hint in rest and (GRAMMAR in rest or "did you mean `ref`" in rest), ran.err


def test_a_misspelt_run_alone_is_named_with_the_closest(two: Path) -> None:
    ran = cli("report", "rfe", "-q")
    assert (
        ran.err.startswith("Error: no run `rfe` in the store") and "did you mean `ref`?" in ran.err
    )
    shown = cli("runs", "show", "othr")
    assert shown.code == 1 and "Hint: did you mean `other`?" in shown.err


def test_report_reads_one_slice(two: Path) -> None:
    mixed = cli("report", "ref@steps=1..3", "other", "-q")
    assert mixed.code == 1 and "keep different steps, gpus or tags" in mixed.err
    assert "Hint: give every run the same @steps=A..B" in mixed.err
    twice = cli("report", "ref@steps=1..3", "--steps", "2..3", "-q")
    assert twice.code == 1
    assert "Error: --steps 2..3 and the selectors' @steps=1..3 name different steps" in twice.err


@pytest.mark.parametrize(
    ("args", "text", "kept"),
    [
        (("show", "ref@steps=1..3", "1-0"), "ref@steps=1..3", "part of a run (steps 1..3)"),
        (("runs", "show", "ref@steps=1..3"), "ref@steps=1..3", "part of a run (steps 1..3)"),
        (("runs", "rm", "ref@steps=2", "--yes"), "ref@steps=2", "part of a run (steps 2)"),
        (("runs", "rm", "ref@steps=2"), "ref@steps=2", "part of a run (steps 2)"),
        (("runs", "check", "gpu=H20"), "gpu=H20", "a slice of the store (gpu H20)"),
        (("ingest-metrics", "log.jsonl", "--run", "ref@steps=1.."), "ref@steps=1..",
         "part of a run (steps 1..)"),
    ],
)  # fmt: skip
def test_whole_run_commands_refuse_part_of_a_run(
    two: Path, args: tuple[str, ...], text: str, kept: str
) -> None:
    before = tree_digest(two)
    ran = cli(*args)
    command = " ".join(args[:2]) if args[0] == "runs" else args[0]
    assert ran.code == 1 and ran.out == ""
    assert ran.err.startswith(f"Error: {command} takes a whole run, and `{text}` selects {kept}")
    assert "\n\nHint: " in ran.err and tree_digest(two) == before


def test_whole_run_commands_take_a_run_however_named(two: Path) -> None:
    assert "Run ref" in cli("runs", "show", "run=ref").out
    shown = cli("show", "run=ref", "1-0", "--json", "-")
    assert shown.code == 0 and json.loads(shown.out)["show"]["run"] == "ref"
    assert "mismatchctl show ref SAMPLE_ID --step N" in cli("show", "ref@steps=1", "1-0").err
    assert "mismatchctl runs rm ref" in cli("runs", "rm", "ref@steps=1", "--yes").err


def test_the_grammar_round_trips() -> None:
    text = selector_text("v1", gpu="H20", tags={"engine": "x"}, steps=StepRange(-6, -5))
    assert text == "run=v1,gpu=H20,engine=x@steps=-6..-5"
    sel = parse_selector(text)
    assert (sel.run, sel.gpu, sel.tags) == ("v1", "H20", {"engine": "x"})
    assert sel.steps == StepRange(-6, -5)
    assert selector_text("v1") == "v1" and parse_selector("v1@steps=3").steps == StepRange(3, 3)
    runs, filters = combine([parse_selector("a@steps=1..2"), parse_selector("b@steps=1-2")])
    assert runs == ["a", "b"] and filters.steps == StepRange(1, 2)
    runs, filters = combine([parse_selector("gpu=H20"), parse_selector("run=a,gpu=H20")])
    assert runs is None and filters.gpu == "H20"  # a selector without a run: every run
    with pytest.raises(UsageError, match="keep different steps, gpus or tags"):
        combine([parse_selector("a"), parse_selector("engine=x")])


def test_a_value_holding_the_grammars_characters_is_selected_in_quotes(
    store: Path, tmp_path: Path
) -> None:
    """A tag value with `@`, `,` or `=` (an engine version string) is written in double
    quotes; the errors list values as they are written; selector_text quotes them itself."""
    dump = step_dump(tmp_path / "v.parquet", list(range(3)), seed=5, per_step=8)
    tag = "vllm@0.8.5,fp8=on"
    assert cli("ingest", str(dump), "--run", "v", "--tag", f"engine={tag}").code == 0
    whole = _reference("v", "0..2")
    assert _report(_json("report", 'engine="vllm@0.8.5,fp8=on"@steps=0..2')) == whole
    assert _report(_json("report", selector_text("v", tags={"engine": tag}))) == whole
    ran = cli("report", 'engine="vllm@0.8.5"')
    assert ran.code == 1
    assert 'no data with engine="vllm@0.8.5" (values: "vllm@0.8.5,fp8=on")' in ran.err
    ran = cli("report", 'engine="vllm@0.8.5')
    assert ran.code == 1 and "has a quote left open" in ran.err
    for text, value in (('k="a\\"b"', 'a"b'), ('k="a\\\\b"', "a\\b"), ('k=" x"', " x")):
        assert parse_selector(text).tags == {"k": value}
        assert parse_selector(selector_text("r", tags={"k": value})).tags == {"k": value}
    with pytest.raises(UsageError, match="is not one value in double quotes"):
        parse_selector('k="a"b')
