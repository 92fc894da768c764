"""``read_metrics``: a training log -> one long table of per-step metric values.

Formats: a W&B history or chart export (CSV), JSON lines of ``{step, name: value, ...}`` as
console/file loggers write them, and TensorBoard event files (see ``read_csv``, ``read_jsonl``,
``read_tensorboard``). Detected from the path unless ``fmt`` is given: a directory or a name
containing ``tfevents`` is TensorBoard, ``.csv`` is CSV, ``.jsonl`` / ``.json`` / ``.ndjson`` /
``.log`` are JSON lines once the first non-blank line is a JSON object.

Nothing is dropped or coerced silently: an empty cell or a missing key means "not logged at
this step"; everything else that does not become a value is counted in ``excluded`` (reason ->
count) and described in ``notes``. NaN and +-inf are values (a NaN gradient norm is signal). A
step logged twice for one metric keeps its last value in file order (``superseded value``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mismatchctl.curves.names import (
    INTERNAL,
    NOT_SELECTED,
    SUPERSEDED,
    Found,
    MetricSpec,
    Selection,
    Values,
    cannot_open,
    count,
    listing,
    numbers,
    parse_metric_specs,
    select_metrics,
)
from mismatchctl.curves.read_csv import read_csv_metrics
from mismatchctl.curves.read_jsonl import read_jsonl_metrics
from mismatchctl.curves.read_tensorboard import EVENT_FILE_MARK, read_tensorboard_metrics
from mismatchctl.display import file_label
from mismatchctl.errors import InputError, UsageError

FORMAT_CSV = "csv"
FORMAT_JSONL = "jsonl"
FORMAT_TENSORBOARD = "tensorboard"
FORMATS = (FORMAT_CSV, FORMAT_JSONL, FORMAT_TENSORBOARD)
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson", ".log")
FORMAT_HINT = "pass --format csv|jsonl|tensorboard."

STEP = "step"
METRIC = "metric"
VALUE = "value"
SCHEMA = pa.schema([(STEP, pa.int64()), (METRIC, pa.string()), (VALUE, pa.float64())])


@dataclass
class MetricsRead:
    """The per-step metrics of one training log, and what reading it left out."""

    table: pa.Table  # step int64, metric string, value float64; sorted by (metric, step), unique
    format: str  # "csv" | "jsonl" | "tensorboard"
    step_column: str  # the step column / key used ("(tensorboard step)" for TensorBoard)
    renamed: dict[str, str]  # NAME -> SOURCE for renamed metrics
    notes: list[str]  # what was excluded and why, prefixes stripped, values superseded, ...
    excluded: dict[str, int]  # reason -> count


def read_metrics(
    path: str | Path,
    *,
    fmt: str | None = None,
    step_column: str | None = None,
    metrics: Sequence[str] = (),
) -> MetricsRead:
    """Read one training log. ``metrics`` are ``--metric`` specs (``NAME=SOURCE`` or a
    pattern); ``step_column`` overrides the detected step column (not for TensorBoard)."""
    source = Path(path)
    specs = parse_metric_specs(metrics)
    step_column = _step_option(step_column)
    kind = detect_metrics_format(source, fmt)
    if kind == FORMAT_TENSORBOARD:
        if step_column is not None:
            raise UsageError(
                "--step-column does not apply to TensorBoard logs: every event carries its step",
                "leave --step-column out.",
            )
        found = read_tensorboard_metrics(source)
    elif kind == FORMAT_CSV:
        found = read_csv_metrics(source, step_column)
    else:
        found = read_jsonl_metrics(source, step_column)
    return build(found, kind, specs, file_label(source))


def _step_option(step_column: str | None) -> str | None:
    if step_column is None:
        return None
    if not step_column.strip():
        raise UsageError("--step-column is empty", "name the column that holds the step.")
    return step_column.strip()


def detect_metrics_format(path: Path, fmt: str | None) -> str:
    """``csv`` / ``jsonl`` / ``tensorboard`` for ``path`` (``fmt`` when given)."""
    if not path.exists():
        raise InputError(f"{path}: no such file or directory", "check the path.")
    if fmt is not None:
        if fmt not in FORMATS:
            raise UsageError(
                f"unknown format `{fmt}` (known: {', '.join(FORMATS)})",
                "pass one of the known formats to --format, or leave it out to detect it.",
            )
        if path.is_dir() and fmt != FORMAT_TENSORBOARD:
            raise UsageError(
                f"{file_label(path)} is a directory, and --format {fmt} reads one file",
                "point at the file, or pass --format tensorboard for a TensorBoard log directory.",
            )
        return fmt
    if path.is_dir() or EVENT_FILE_MARK in path.name:
        return FORMAT_TENSORBOARD
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return FORMAT_CSV
    if suffix in JSONL_SUFFIXES:
        _check_json_lines(path)
        return FORMAT_JSONL
    raise InputError(
        f"cannot tell the format of {file_label(path)} "
        f"({f'suffix `{path.suffix}`' if path.suffix else 'no suffix'})",
        FORMAT_HINT,
    )


def _check_json_lines(path: Path) -> None:
    """The first non-blank line must be a JSON object."""
    number, raw = _first_line(path)
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        obj = None
    if not isinstance(obj, dict):
        raise InputError(
            f"cannot tell the format of {file_label(path)}: line {number} is not a JSON object, "
            "so this is not JSON lines",
            f"JSON lines hold one object per line; {FORMAT_HINT}",
        )


def _first_line(path: Path) -> tuple[int, bytes]:
    """(line number, text) of the first non-blank line."""
    try:
        with path.open("rb") as fh:
            for number, raw in enumerate(fh, 1):
                if raw.strip():
                    return number, raw
    except OSError as exc:
        raise cannot_open(path, exc) from None
    raise InputError(f"{file_label(path)} is empty", "point at the metrics log.")


def build(found: Found, fmt: str, specs: Sequence[MetricSpec], label: str) -> MetricsRead:
    """Apply ``--metric`` to what a reader found, and build the table (one value per step)."""
    selection = select_metrics(list(found.columns), specs, label, found.internal)
    notes, excluded = list(found.notes), Counter(found.excluded)
    _note_left_out(found, selection, notes, excluded)
    kept = _numeric(found, selection, label, notes, excluded)
    empty = sorted(name for name, values in kept.items() if not len(values.steps))
    if empty:
        notes.append(
            f"{count(len(empty), 'metric')} without any value at a step, left out: {listing(empty)}"
        )
    kept = {name: values for name, values in kept.items() if len(values.steps)}
    if not kept:
        raise _no_values(label, excluded)
    table, superseded = _table(kept)
    if superseded:
        total = sum(n for n, _ in superseded.values())
        excluded[SUPERSEDED] += total
        where = [f"`{name}` at {_steps_text(dup)}" for name, (_, dup) in superseded.items()]
        notes.append(
            f"{count(total, 'value')} superseded by a later value for the same step and metric "
            f"(kept the last in file order; e.g. a resumed run logging steps again): "
            f"{listing(where)}"
        )
    renamed = {n: s for n, s in selection.names.items() if n != s and n in kept}
    return MetricsRead(table, fmt, found.step_column, renamed, notes, dict(excluded))


def _note_left_out(
    found: Found, selection: Selection, notes: list[str], excluded: Counter[str]
) -> None:
    chosen = set(selection.names.values())
    internal = [n for n in found.columns if n in found.internal and n not in chosen]
    if internal:
        excluded[INTERNAL] += len(internal)
        notes.append(
            f"excluded {count(len(internal), 'internal column')} (names starting with `_`, "
            f"bookkeeping such as W&B's _runtime): {listing(internal)}"
        )
    others = [n for n in found.columns if n not in found.internal]
    unselected = [n for n in others if n not in chosen]
    if unselected:
        excluded[NOT_SELECTED] += len(unselected)
        notes.append(
            f"{count(len(unselected), 'metric')} not selected by --metric: {listing(unselected)}"
        )


def _numeric(
    found: Found, selection: Selection, label: str, notes: list[str], excluded: Counter[str]
) -> dict[str, Values]:
    """The selected metrics that hold numbers; the others are noted (an error when a
    ``NAME=SOURCE`` names one)."""
    kept: dict[str, Values] = {}
    left_out: dict[str, list[str]] = {}
    for name, source in selection.names.items():
        item = found.columns[source]
        if isinstance(item, Values):
            kept[name] = item
            continue
        if source in selection.explicit:
            raise InputError(
                f"--metric {name}={source}: `{source}` in {label} is a {item.reason} "
                f"({item.detail})",
                "name a metric that holds numbers.",
            )
        left_out.setdefault(item.reason, []).append(f"`{source}` ({item.detail})")
    for reason, items in left_out.items():
        excluded[reason] += len(items)
        notes.append(f"excluded {count(len(items), reason)}: {listing(items)}")
    return kept


def _no_values(label: str, excluded: Counter[str]) -> InputError:
    why = ", ".join(f"{count(n, reason)}" for reason, n in sorted(excluded.items()))
    return InputError(
        f"{label} holds no metric values" + (f" (excluded: {why})" if why else ""),
        "a metric needs numbers at rows that have a step; choose the step with --step-column "
        "and the metrics with --metric.",
    )


def _table(kept: dict[str, Values]) -> tuple[pa.Table, dict[str, tuple[int, np.ndarray]]]:
    """The long table sorted by (metric, step), and metric -> (superseded, steps logged twice)."""
    names = sorted(kept)
    steps, values, lengths = [], [], []
    superseded: dict[str, tuple[int, np.ndarray]] = {}
    for name in names:
        s, v, n, dup = last_per_step(kept[name])
        steps.append(s)
        values.append(v)
        lengths.append(len(s))
        if n:
            superseded[name] = (n, dup)
    index = pa.array(np.repeat(np.arange(len(names)), lengths))
    table = pa.table(
        {
            STEP: pa.array(np.concatenate(steps), pa.int64()),
            METRIC: pc.take(pa.array(names, pa.string()), index),
            VALUE: pa.array(np.concatenate(values), pa.float64()),
        },
        schema=SCHEMA,
    )
    return table, superseded


def last_per_step(values: Values) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """``(steps, values, superseded, steps logged more than once)``: one value per step, the
    last in file order, steps ascending."""
    backwards = values.steps[::-1]
    steps, first, counts = np.unique(backwards, return_index=True, return_counts=True)
    kept = values.values[::-1][first]
    return steps, kept, len(values.steps) - len(steps), steps[counts > 1]


def _steps_text(steps: np.ndarray) -> str:
    return f"{'step' if len(steps) == 1 else 'steps'} {numbers(steps.tolist())}"
