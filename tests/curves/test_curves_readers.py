"""Readers of per-step training metrics (issue #10): W&B CSV exports, JSON lines, TensorBoard.

The CSV and JSONL fixtures are committed under tests/data/metrics/; the TensorBoard logs are
written here with torch's SummaryWriter and TensorBoard's own tf-free writer. Every table, note,
exclusion count and error message is asserted exactly.
"""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path

import pytest

from mismatchctl.curves.read import MetricsRead, read_metrics
from mismatchctl.errors import InputError, MissingDependencyError, UsageError

DATA = Path(__file__).parents[1] / "data" / "metrics"
HISTORY = DATA / "wandb_history.csv"
CHART = DATA / "wandb_chart.csv"
CONSOLE = DATA / "console.jsonl"
NAN = "nan"  # rows() spells NaN this way so that rows compare with ==

Row = tuple[str, int, float | str]


def rows(read: MetricsRead) -> list[Row]:
    """(metric, step, value) in table order, NaN as "nan"."""
    t = read.table.to_pydict()
    return [
        (m, s, NAN if math.isnan(v) else v)
        for m, s, v in zip(t["metric"], t["step"], t["value"], strict=True)
    ]


def fails(exc: type[Exception], path: Path | str, **options: object) -> str:
    with pytest.raises(exc) as info:
        read_metrics(path, **options)  # type: ignore[arg-type]
    return str(info.value)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test runs in its own directory: files written there are named by relative paths,
    as messages name them (the path as given)."""
    monkeypatch.chdir(tmp_path)


def write(tmp_path: Path, name: str, text: str) -> Path:
    """``name`` written in the test's directory; its path relative to it (as a user gives it)."""
    (tmp_path / name).write_text(text, encoding="utf-8")
    return Path(name)


# ---------------------------------------------------------------------------------------- CSV


def test_wandb_history_export() -> None:
    read = read_metrics(HISTORY)
    assert read.table.schema.names == ["step", "metric", "value"]
    assert [str(t) for t in read.table.schema.types] == ["int64", "string", "double"]
    assert rows(read) == [
        ("actor/entropy", 0, 1.25),
        ("actor/entropy", 1, 1.5),
        ("actor/entropy", 2, 1.0),
        ("actor/entropy", 4, 0.75),
        ("actor/grad_norm", 0, 0.5),
        ("actor/grad_norm", 1, 0.75),
        ("actor/grad_norm", 2, NAN),
        ("actor/grad_norm", 3, math.inf),
        ("actor/grad_norm", 4, -math.inf),
        ("actor/lr", 0, 1e-06),
        ("actor/lr", 1, 1e-06),
        ("actor/lr", 2, 1e-06),
        ("actor/lr", 3, 1e-06),
        ("actor/lr", 4, 1e-06),
        ("critic/score/mean", 0, 0.125),
        ("critic/score/mean", 2, 0.25),
        ("critic/score/mean", 3, 0.5),
        ("critic/score/mean", 4, 0.375),
        ("response_length/mean", 0, 512.0),
        ("response_length/mean", 1, 498.5),
        ("response_length/mean", 2, 530.0),
        ("response_length/mean", 4, 501.0),
    ]
    assert (read.format, read.step_column, read.renamed) == ("csv", "_step", {})
    assert read.excluded == {"row without step": 1, "internal column": 3, "non-numeric column": 1}
    assert read.notes == [
        "excluded 1 row without a value in the step column `_step` (data row 5) with every "
        "value they hold",
        "excluded 3 internal columns (names starting with `_`, bookkeeping such as W&B's "
        "_runtime): _runtime, _timestamp, _wandb",
        "excluded 1 non-numeric column: `train/phase` (e.g. 'warmup' in data row 1)",
    ]


def test_wandb_chart_export_prefix_and_companions() -> None:
    read = read_metrics(CHART)
    assert rows(read) == [
        ("actor/grad_norm", 1, 0.5),
        ("actor/grad_norm", 2, 0.75),
        ("actor/grad_norm", 4, 1.5),
    ]
    assert (read.step_column, read.excluded) == ("Step", {"min/max companion column": 2})
    assert read.notes == [
        "stripped the prefix `my-run - ` that every metric column carries (a W&B chart export "
        "names its columns `<run name> - <metric>`)",
        "excluded 2 min/max companion columns of a W&B chart export (the range around each "
        "line, not values of the run): actor/grad_norm__MIN, actor/grad_norm__MAX",
    ]


def test_chart_prefix_needs_every_column(tmp_path: Path) -> None:
    """Two runs in one chart export: no common prefix, names kept whole; a __MIN without its
    base column is an ordinary metric."""
    path = write(tmp_path, "two.csv", "Step,a - loss,b - loss,x__MIN\n1,0.5,0.25,2\n")
    read = read_metrics(path)
    assert rows(read) == [("a - loss", 1, 0.5), ("b - loss", 1, 0.25), ("x__MIN", 1, 2.0)]
    assert (read.notes, read.excluded) == ([], {})


def test_metric_selection_renames_and_patterns() -> None:
    read = read_metrics(HISTORY, metrics=["grad_norm=actor/grad_norm", "critic/*"])
    assert rows(read) == [
        ("critic/score/mean", 0, 0.125),
        ("critic/score/mean", 2, 0.25),
        ("critic/score/mean", 3, 0.5),
        ("critic/score/mean", 4, 0.375),
        ("grad_norm", 0, 0.5),
        ("grad_norm", 1, 0.75),
        ("grad_norm", 2, NAN),
        ("grad_norm", 3, math.inf),
        ("grad_norm", 4, -math.inf),
    ]
    assert read.renamed == {"grad_norm": "actor/grad_norm"}
    assert read.excluded == {"row without step": 1, "internal column": 3, "not selected": 4}
    assert read.notes[2] == (
        "4 metrics not selected by --metric: actor/entropy, response_length/mean, actor/lr, "
        "train/phase"
    )


def test_pattern_does_not_keep_a_renamed_source_twice() -> None:
    read = read_metrics(HISTORY, metrics=["gn=actor/grad_norm", "actor/*"])
    assert sorted(set(read.table.column("metric").to_pylist())) == [
        "actor/entropy",
        "actor/lr",
        "gn",
    ]


def test_internal_column_by_explicit_name(tmp_path: Path) -> None:
    read = read_metrics(HISTORY, metrics=["runtime=_runtime"])
    assert rows(read)[:2] == [("runtime", 0, 12.5), ("runtime", 1, 25.0)]
    assert read.excluded == {"row without step": 1, "internal column": 2, "not selected": 6}


def test_metric_spec_errors() -> None:
    found = (
        "found: actor/grad_norm, actor/entropy, critic/score/mean, response_length/mean, "
        "actor/lr, train/phase"
    )
    assert fails(InputError, HISTORY, metrics=["gn=actor/gradnorm"]) == (
        f"--metric gn=actor/gradnorm: no metric `actor/gradnorm` in {HISTORY} ({found})"
        "\n\nHint: name an existing metric on the right of `=` (names are case-sensitive)."
    )
    assert fails(InputError, HISTORY, metrics=["Actor/*"]) == (
        f"--metric Actor/*: no metric in {HISTORY} matches `Actor/*` ({found})\n\n"
        "Hint: patterns use shell wildcards (e.g. 'actor/*') and are case-sensitive."
    )
    assert fails(UsageError, HISTORY, metrics=["actor/lr=actor/grad_norm", "actor/*"]) == (
        "--metric: metric `actor/lr` would come from both `actor/grad_norm` "
        "(--metric actor/lr=actor/grad_norm) and `actor/lr` (--metric actor/*)\n\n"
        "Hint: keep one of them under another name, e.g. --metric actor/lr_2=actor/lr."
    )
    assert fails(UsageError, HISTORY, metrics=["x=actor/lr", "x=actor/entropy"]) == (
        "--metric `x=actor/lr` and --metric `x=actor/entropy` both name a metric `x`\n\n"
        "Hint: give each metric its own name."
    )
    for bad in ("=actor/lr", "x=", " "):
        assert fails(UsageError, HISTORY, metrics=[bad]) == (
            f"--metric `{bad}` is neither NAME=SOURCE nor a name or pattern\n\n"
            "Hint: write e.g. --metric grad_norm=actor/grad_norm or --metric 'critic/*'."
        )


def test_available_names_are_listed_up_to_twenty(tmp_path: Path) -> None:
    names = [f"m{i:02d}" for i in range(25)]
    path = write(tmp_path, "wide.csv", "step," + ",".join(names) + "\n1" + ",1" * 25 + "\n")
    message = fails(InputError, path, metrics=["x=nope"])
    assert message.startswith(
        "--metric x=nope: no metric `nope` in wide.csv (found: m00, m01, m02,"
    )
    assert "m19, ... (25 in all))\n\nHint:" in message


def test_rename_of_a_non_numeric_column_is_an_error() -> None:
    assert fails(InputError, HISTORY, metrics=["phase=train/phase"]) == (
        f"--metric phase=train/phase: `train/phase` in {HISTORY} is a non-numeric "
        "column (e.g. 'warmup' in data row 1)\n\nHint: name a metric that holds numbers."
    )


def test_step_column_option_and_integral_floats(tmp_path: Path) -> None:
    path = write(tmp_path, "log.csv", "step,epoch,loss\n10,1.0,0.5\n20,2e0,0.25\n30,,0.125\n")
    read = read_metrics(path, step_column="epoch")
    assert rows(read) == [("loss", 1, 0.5), ("loss", 2, 0.25), ("step", 1, 10.0), ("step", 2, 20.0)]
    assert read.step_column == "epoch"
    assert read.excluded == {"row without step": 1}
    assert fails(InputError, path, step_column="iter") == (
        "log.csv: no column `iter` (from --step-column) (found: step, epoch, loss)\n\n"
        "Hint: name an existing column with --step-column."
    )


@pytest.mark.parametrize("value", ["3.5", "NaN", "abc", "1e40"])
def test_step_must_be_a_whole_number(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, "log.csv", f"step,loss\n1,0.5\n{value},0.25\n")
    assert fails(InputError, path) == (
        f"log.csv: data row 2: step column `step` holds '{value}', expected a whole number\n\n"
        "Hint: the step column must hold whole numbers; name another one with --step-column."
    )


def test_no_step_column(tmp_path: Path) -> None:
    path = write(tmp_path, "log.csv", "epoch_x,loss\n1,0.5\n")
    assert fails(InputError, path) == (
        "log.csv: no step column (looked for _step, step, Step, global_step, "
        "trainer/global_step, train/global_step, training/global_step, rollout_id, iteration; "
        "found: epoch_x, loss)\n\n"
        "Hint: name the column that holds the step with --step-column <column>."
    )


def test_step_column_without_any_value(tmp_path: Path) -> None:
    path = write(tmp_path, "log.csv", "step,loss\n,0.5\n ,0.25\n")
    assert fails(InputError, path) == (
        "log.csv has no value in column `step` in any row, so no step\n\n"
        "Hint: name the column that holds the step with --step-column (columns: step, loss)."
    )
    header_only = write(tmp_path, "head.csv", "step,loss\n")
    assert fails(InputError, header_only) == (
        "head.csv has no data rows, so no step\n\n"
        "Hint: name the column that holds the step with --step-column (columns: step, loss)."
    )


def test_whitespace_text_booleans_and_empty_columns(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "log.csv",
        ' step , loss ,flag,unused,"q"\n 1 , 0.5 ,true,,1\n2,  ,false,,""\n3,-inf,,,+NaN\n',
    )
    read = read_metrics(path)
    assert rows(read) == [
        ("loss", 1, 0.5),
        ("loss", 3, -math.inf),
        ("q", 1, 1.0),
        ("q", 3, NAN),
    ]
    assert read.excluded == {"non-numeric column": 1}
    assert read.notes == [
        "excluded 1 non-numeric column: `flag` (e.g. 'true' in data row 1)",
        "1 metric without any value at a step, left out: unused",
    ]


def test_bad_column_names(tmp_path: Path) -> None:
    hint = (
        "\n\nHint: every column or key needs a name of printable characters; fix the header or "
        "the logger that wrote it (an unnamed first CSV column is often a pandas index: "
        "to_csv(index=False))."
    )
    unnamed = write(tmp_path, "pandas.csv", ",step,loss\n0,1,0.5\n")
    assert fails(InputError, unnamed) == "pandas.csv: column 1: the name '' is empty" + hint
    control = write(tmp_path, "ctl.csv", 'step,"lo\x07ss"\n1,0.5\n')
    assert fails(InputError, control) == (
        "ctl.csv: column 2: the name 'lo\\x07ss' contains control characters" + hint
    )
    twice = write(tmp_path, "twice.csv", "step,loss, loss\n1,0.5,0.25\n")
    assert fails(InputError, twice) == (
        "twice.csv: columns 2 and 3 are both named `loss`\n\n"
        "Hint: rename one of them in the header."
    )


def test_ragged_csv(tmp_path: Path) -> None:
    path = write(tmp_path, "ragged.csv", "step,loss\n1,0.5\n2,0.25,9\n")
    message = fails(InputError, path)
    assert message.startswith("cannot read ragged.csv as CSV: CSV parse error: ")
    assert "Expected 2 columns, got 3" in message
    assert message.endswith(
        "\n\nHint: the file is truncated or not what its name says; re-export it, or pass --format."
    )


def test_no_metric_values(tmp_path: Path) -> None:
    path = write(tmp_path, "text.csv", "step,_runtime,note\n1,2.5,hello\n")
    assert fails(InputError, path) == (
        "text.csv holds no metric values (excluded: 1 internal column, 1 non-numeric column)"
        "\n\nHint: a metric needs numbers at rows that have a step; choose the step with "
        "--step-column and the metrics with --metric."
    )


def test_duplicate_steps_in_csv_keep_the_last(tmp_path: Path) -> None:
    path = write(tmp_path, "resumed.csv", "step,loss\n1,0.5\n2,0.25\n1,0.75\n2,\n3,1\n")
    read = read_metrics(path)
    assert rows(read) == [("loss", 1, 0.75), ("loss", 2, 0.25), ("loss", 3, 1.0)]
    assert read.excluded == {"superseded value": 1}
    assert read.notes == [
        "1 value superseded by a later value for the same step and metric (kept the last in "
        "file order; e.g. a resumed run logging steps again): `loss` at step 1"
    ]


# -------------------------------------------------------------------------------------- JSONL


def test_console_jsonl() -> None:
    read = read_metrics(CONSOLE)
    assert rows(read) == [
        ("actor/entropy", 1, 1.25),
        ("actor/entropy", 2, 1.125),
        ("actor/entropy", 3, 1.0),
        ("actor/grad_norm", 1, 0.5),
        ("actor/grad_norm", 2, 0.625),
        ("actor/grad_norm", 3, NAN),
        ("actor/grad_norm", 4, 1.5),
        ("critic/score/mean", 1, 0.125),
        ("critic/score/mean", 2, 0.375),
        ("critic/score/mean", 4, 0.5),
        ("timing/gen_s", 2, 12.5),
    ]
    assert (read.format, read.step_column, read.renamed) == ("jsonl", "step", {})
    assert read.excluded == {
        "row without step": 1,
        "internal column": 2,
        "non-numeric column": 2,
        "superseded value": 2,
    }
    assert read.notes == [
        "excluded 1 line without a value for the step key `step` (line 5) with every value "
        "they hold",
        "excluded 2 internal columns (names starting with `_`, bookkeeping such as W&B's "
        "_runtime): _runtime, _timestamp",
        'excluded 2 non-numeric columns: `phase` (e.g. "rollout" on line 1), `event` '
        '(e.g. "checkpoint saved" on line 5)',
        "2 values superseded by a later value for the same step and metric (kept the last in "
        "file order; e.g. a resumed run logging steps again): `actor/grad_norm` at step 2, "
        "`critic/score/mean` at step 2",
    ]


def test_jsonl_nested_step_and_leaf_kinds(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "nested.log",
        '{"trainer": {"global_step": 1.0}, "a": {"b": [1, 2]}, "c": {}, "d": null, "e": 2}\n'
        '{"trainer": {"global_step": 2}, "a": {"b": null}, "d": 0.5, "e": true}\n',
    )
    read = read_metrics(path, metrics=["d", "a/*", "c", "e"])
    assert rows(read) == [("d", 2, 0.5)]
    assert read.step_column == "trainer/global_step"
    assert read.excluded == {"non-numeric column": 3}
    assert read.notes == [
        "excluded 3 non-numeric columns: `a/b` (e.g. [1, 2] on line 1), `c` (e.g. {} on line "
        "1), `e` (e.g. true on line 2)"
    ]


def test_jsonl_line_errors(tmp_path: Path) -> None:
    broken = write(tmp_path, "m.jsonl", '{"step": 1, "loss": 0.5}\n\n{"step": 2, "loss": \n')
    assert fails(InputError, broken) == (
        "m.jsonl: line 3 is not valid JSON (Expecting value at column 21)\n\n"
        "Hint: the file is truncated or corrupt; repair or remove that line."
    )
    array = write(tmp_path, "a.jsonl", '{"step": 1, "loss": 0.5}\n[1, 2]\n')
    assert fails(InputError, array) == (
        "a.jsonl: line 2 is a JSON array, expected an object\n\n"
        'Hint: every line must be one JSON object, e.g. {"step": 1, "loss": 0.5}.'
    )
    twice = write(tmp_path, "t.jsonl", '{"step": 1, "loss": 0.5, "loss": 0.25}\n')
    assert fails(InputError, twice) == (
        "t.jsonl: line 1 holds the key `loss` twice in one object\n\n"
        "Hint: fix the logger so that each key appears once."
    )
    clash = write(tmp_path, "c.jsonl", '{"step": 1, "a/b": 0.5, "a": {"b": 0.25}}\n')
    assert fails(InputError, clash) == (
        "c.jsonl: line 1: the key `a/b` appears twice once nested objects are flattened with "
        "`/`\n\nHint: fix the logger so that each metric has one name."
    )
    empty_key = write(tmp_path, "e.jsonl", '{"step": 1, " ": 0.5}\n')
    assert fails(InputError, empty_key).startswith("e.jsonl: line 1: the name ' ' is empty\n\n")
    control = write(tmp_path, "k.jsonl", '{"step": 1, "a": {"b\\u0001": 0.5}}\n')
    assert fails(InputError, control).startswith(
        "k.jsonl: line 1: the name 'a/b\\x01' contains control characters\n\nHint: "
    )


@pytest.mark.parametrize(
    ("value", "shown"), [("3.5", "3.5"), ('"3"', '"3"'), ("true", "true"), ("NaN", "NaN")]
)
def test_jsonl_step_must_be_a_whole_number(tmp_path: Path, value: str, shown: str) -> None:
    path = write(tmp_path, "m.jsonl", f'{{"step": 1, "x": 1}}\n{{"step": {value}, "x": 2}}\n')
    assert fails(InputError, path) == (
        f"m.jsonl: line 2: step `step` is {shown}, expected a whole number\n\n"
        "Hint: the step key must hold whole numbers; name another one with --step-column."
    )


def test_jsonl_without_steps(tmp_path: Path) -> None:
    path = write(tmp_path, "m.jsonl", '{"step": null, "loss": 1}\n{"loss": 2}\n')
    assert fails(InputError, path) == (
        "m.jsonl: no line has a value for the step key `step`\n\n"
        "Hint: name the key that holds the step with --step-column (keys: step, loss)."
    )
    blank = write(tmp_path, "b.jsonl", "\n  \n")
    assert fails(InputError, blank, fmt="jsonl") == (
        "b.jsonl holds no JSON lines\n\nHint: point at the metrics log."
    )


# --------------------------------------------------------------------------- format detection


def test_format_detection(tmp_path: Path) -> None:
    assert read_metrics(write(tmp_path, "m.json", '{"step": 1, "x": 2}\n')).format == "jsonl"
    assert read_metrics(write(tmp_path, "m.txt", '{"step": 1, "x": 2}\n'), fmt="jsonl").format == (
        "jsonl"
    )
    assert fails(InputError, write(tmp_path, "m.parquet", "x")) == (
        "cannot tell the format of m.parquet (suffix `.parquet`)\n\n"
        "Hint: pass --format csv|jsonl|tensorboard."
    )
    assert fails(InputError, write(tmp_path, "README", "x")) == (
        "cannot tell the format of README (no suffix)\n\nHint: pass --format csv|jsonl|tensorboard."
    )
    text_log = write(tmp_path, "train.log", "\nINFO step 1 loss 0.5\n")
    assert fails(InputError, text_log) == (
        "cannot tell the format of train.log: line 2 is not a JSON object, so this is not JSON "
        "lines\n\nHint: JSON lines hold one object per line; pass --format csv|jsonl|tensorboard."
    )
    assert fails(InputError, write(tmp_path, "e.ndjson", "\n")) == (
        "e.ndjson is empty\n\nHint: point at the metrics log."
    )


def test_missing_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    assert fails(InputError, missing) == (
        f"{missing}: no such file or directory\n\nHint: check the path."
    )


@pytest.mark.parametrize("name", ["locked.csv", "locked.jsonl", "locked.log"])
def test_unreadable_file(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    locked = write(tmp_path, name, '{"step": 1, "x": 2}\n')
    real_open = Path.open

    def deny(self: Path, *args: object, **kwargs: object) -> object:  # chmod 0: root reads
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "open", deny)
    assert fails(InputError, locked) == (
        f"cannot read {locked}: Permission denied\n\n"
        "Hint: check that the path is right and that you may read it."
    )


def test_format_option_errors(tmp_path: Path) -> None:
    assert fails(UsageError, HISTORY, fmt="parquet") == (
        "unknown format `parquet` (known: csv, jsonl, tensorboard)\n\n"
        "Hint: pass one of the known formats to --format, or leave it out to detect it."
    )
    (tmp_path / "logs").mkdir()
    assert fails(UsageError, Path("logs"), fmt="csv") == (
        "logs is a directory, and --format csv reads one file\n\n"
        "Hint: point at the file, or pass --format tensorboard for a TensorBoard log directory."
    )
    assert fails(UsageError, HISTORY, step_column=" ") == (
        "--step-column is empty\n\nHint: name the column that holds the step."
    )


# -------------------------------------------------------------------------------- TensorBoard


@pytest.fixture(scope="module")
def summary_writer() -> type:
    return pytest.importorskip("torch.utils.tensorboard").SummaryWriter


def _torch_log(
    writer_cls: type, directory: Path, scalars: dict[str, list[tuple[int, float]]]
) -> None:
    writer = writer_cls(log_dir=str(directory))
    for tag, points in scalars.items():
        for step, value in points:
            writer.add_scalar(tag, value, step)
    writer.close()


def test_tensorboard_train_and_eval_directories(tmp_path: Path, summary_writer: type) -> None:
    _torch_log(summary_writer, tmp_path / "train", {"loss": [(1, 0.5), (2, 0.25)]})
    _torch_log(summary_writer, tmp_path / "eval", {"loss": [(2, 0.75)], "acc": [(2, 0.125)]})
    read = read_metrics(tmp_path)
    assert rows(read) == [
        ("eval/acc", 2, 0.125),
        ("eval/loss", 2, 0.75),
        ("train/loss", 1, 0.5),
        ("train/loss", 2, 0.25),
    ]
    assert (read.format, read.step_column, read.excluded) == (
        "tensorboard",
        "(tensorboard step)",
        {},
    )
    assert read.notes == [
        "event files in 2 directories: each tag is prefixed with its directory (eval/, train/)"
    ]
    picked = read_metrics(tmp_path, metrics=["loss=train/loss"])
    assert rows(picked) == [("loss", 1, 0.5), ("loss", 2, 0.25)]
    assert (picked.renamed, picked.excluded) == ({"loss": "train/loss"}, {"not selected": 2})


def test_tensorboard_single_directory(tmp_path: Path, summary_writer: type) -> None:
    import numpy as np

    writer = summary_writer(log_dir=str(tmp_path / "run"))
    writer.add_scalar("actor/grad_norm", 0.5, 1)
    writer.add_scalar("actor/grad_norm", float("nan"), 2)
    writer.add_scalar("actor/entropy", 1.25, 1, new_style=True)  # a scalars-plugin tensor
    writer.add_histogram("weights", np.array([1.0, 2.0, 3.0]), 1)
    writer.add_text("sample", "hello", 1)
    writer.close()
    read = read_metrics(tmp_path / "run")
    assert rows(read) == [
        ("actor/entropy", 1, 1.25),
        ("actor/grad_norm", 1, 0.5),
        ("actor/grad_norm", 2, NAN),
    ]
    assert read.excluded == {"non-scalar tag": 2}
    assert read.notes == [
        "excluded 2 non-scalar tags: `sample/text_summary` (text tensor), `weights` (histogram)"
    ]
    assert fails(InputError, Path("run"), metrics=["w=weights"]) == (
        "--metric w=weights: `weights` in run is a non-scalar tag (histogram)\n\n"
        "Hint: name a metric that holds numbers."
    )
    # nested one level below the given directory: still one directory, no prefix
    assert rows(read_metrics(tmp_path)) == rows(read)
    # a single event file
    (event_file,) = (tmp_path / "run").iterdir()
    assert rows(read_metrics(event_file)) == rows(read)


def test_tensorboard_tf_free_writer(tmp_path: Path) -> None:
    summary = pytest.importorskip("tensorboard.summary")
    writer = summary.Writer(str(tmp_path))
    writer.add_scalar("critic/score/mean", 0.25, 3)
    writer.add_scalar("critic/score/mean", 0.5, 4)
    writer.close()
    read = read_metrics(tmp_path)
    assert rows(read) == [("critic/score/mean", 3, 0.25), ("critic/score/mean", 4, 0.5)]
    assert (read.notes, read.excluded) == ([], {})


def test_tensorboard_resumed_run_keeps_the_last_value(tmp_path: Path, summary_writer: type) -> None:
    _torch_log(summary_writer, tmp_path / "a", {"loss": [(1, 1.0), (2, 2.0), (3, 3.0)]})
    _torch_log(summary_writer, tmp_path / "b", {"loss": [(2, 0.5), (3, 0.75), (4, 0.25)]})
    # file order = name order, as TensorBoard reads them: creation time first
    run = tmp_path / "run"
    run.mkdir()
    for i, part in enumerate("ab"):
        (src,) = (tmp_path / part).iterdir()
        src.rename(run / f"events.out.tfevents.{1700000000 + i}.host")
    read = read_metrics(run)
    assert rows(read) == [("loss", 1, 1.0), ("loss", 2, 0.5), ("loss", 3, 0.75), ("loss", 4, 0.25)]
    assert read.excluded == {"superseded value": 2}
    assert read.notes == [
        "2 values superseded by a later value for the same step and metric (kept the last in "
        "file order; e.g. a resumed run logging steps again): `loss` at steps 2, 3"
    ]


def test_tensorboard_damaged_and_empty_files(tmp_path: Path, summary_writer: type) -> None:
    _torch_log(summary_writer, tmp_path / "w", {"loss": [(1, 0.5), (2, 0.25), (3, 0.125)]})
    (good,) = (tmp_path / "w").iterdir()
    data = good.read_bytes()
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.out.tfevents.1.host").write_bytes(data[:-5])  # last record cut short
    (run / "events.out.tfevents.2.host").write_bytes(b"")
    logger = logging.getLogger("tensorboard")
    level, filters = logger.level, list(logger.filters)
    read = read_metrics(Path("run"))  # as given: files inside are named run/<file>
    assert (logger.level, logger.filters) == (level, filters)  # no logging state left behind
    assert rows(read) == [("loss", 1, 0.5), ("loss", 2, 0.25)]
    assert read.excluded == {"event file read up to a damaged record": 1, "empty event file": 1}
    assert read.notes == [
        "run/events.out.tfevents.1.host: reading stopped at a damaged or truncated record; the "
        "events after it in that file, if any, are not read (a writer killed mid-write leaves "
        "a truncated record)",
        "skipped the empty event file run/events.out.tfevents.2.host (a writer that never flushed)",
    ]
    (run / "events.out.tfevents.3.host").write_bytes(b"not an event file at all")
    assert fails(InputError, Path("run")) == (
        "run/events.out.tfevents.3.host: no TensorBoard event could be read from it (not an event "
        "file, or damaged from its first record)\n\n"
        "Hint: remove it from the log directory, or point at the good event files."
    )


def test_tensorboard_directory_errors(tmp_path: Path, summary_writer: type) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert fails(InputError, Path("empty")) == (
        "no TensorBoard event files (names containing `tfevents`) in empty or below\n\n"
        "Hint: point at the log directory a SummaryWriter wrote, or pass --format csv|jsonl."
    )
    _torch_log(summary_writer, tmp_path / "clash", {"train/loss": [(1, 0.5)]})
    _torch_log(summary_writer, tmp_path / "clash" / "train", {"loss": [(1, 0.25)]})
    assert fails(InputError, Path("clash")) == (
        "clash: the tag `train/loss` comes from both the log directory itself and `train/`\n\n"
        "Hint: read the sub-directories one at a time."
    )
    assert fails(UsageError, tmp_path / "clash", step_column="step") == (
        "--step-column does not apply to TensorBoard logs: every event carries its step\n\n"
        "Hint: leave --step-column out."
    )


def test_tensorboard_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "events.out.tfevents.1.host").write_bytes(b"")
    for name in [m for m in sys.modules if m == "tensorboard" or m.startswith("tensorboard.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    with pytest.raises(MissingDependencyError) as info:
        read_metrics(tmp_path)
    assert str(info.value) == (
        "reading TensorBoard event files needs the `tensorboard` package\n\n"
        "Hint: pip install 'mismatchctl[tensorboard]'"
    )
