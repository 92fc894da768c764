"""Training curves from a CSV: a W&B history export (``_step,_runtime,...``), a W&B chart export
(``Step,"<run> - <metric>",...__MIN,...__MAX``) or any CSV with a step column.

Every cell is read as text (pyarrow) and converted with explicit checks. Whitespace around a
cell is ignored; an empty cell means "not logged at this step". A number is a decimal literal or
``NaN`` / ``inf`` / ``Infinity`` with an optional sign (W&B writes ``NaN``, ``Infinity`` and
``-Infinity``); anything else (text, ``true``, ``[1, 2]``) makes its column non-numeric. Rows
are counted from 1 after the header ("data row 3" is the third row below the header).
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from mismatchctl.curves.names import (
    COMPANION,
    NON_NUMERIC,
    ROW_WITHOUT_STEP,
    Found,
    NonNumeric,
    Values,
    cannot_open,
    chart_prefix,
    clean_name,
    companion_columns,
    count,
    find_step_column,
    is_internal,
    listing,
    numbers,
    shorten,
    unreadable,
)
from mismatchctl.display import file_label
from mismatchctl.errors import InputError

# The same pattern for Python's re and Arrow's RE2 (ASCII digits on purpose).
_DIGITS = "[0-9]"
NUMBER = (
    rf"[+-]?(?:{_DIGITS}+\.?{_DIGITS}*(?:[eE][+-]?{_DIGITS}+)?"
    rf"|\.{_DIGITS}+(?:[eE][+-]?{_DIGITS}+)?|(?i:nan|inf|infinity))"
)
INTEGER = rf"[+-]?{_DIGITS}+"
_NUMBER_RE = re.compile(NUMBER)
_INTEGER_RE = re.compile(INTEGER)
INT64_LIMIT = 2**63


def read_csv_metrics(path: Path, step_column: str | None) -> Found:
    """Read ``path``; see the module docstring."""
    names = [
        clean_name(h, f"{file_label(path)}: column {i}") for i, h in enumerate(_header(path), 1)
    ]
    _check_unique(names, path)
    cells = dict(zip(names, _cells(path, len(names)), strict=True))
    step = find_step_column(names, step_column, file_label(path), "column")
    found = Found(step, {})
    steps, has_step = _steps(cells[step], path, step, names)
    _note_stepless(has_step, step, found)
    for source, name in _layout([n for n in names if n != step], step, path, found).items():
        found.columns[name] = _column(cells[source], steps, has_step)
        if is_internal(name, step):
            found.internal.add(name)
    return found


def _header(path: Path) -> list[str]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            row = next(csv.reader(fh), None)
    except OSError as exc:
        raise cannot_open(path, exc) from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise unreadable(path, "CSV", exc) from None
    if not row:
        raise InputError(
            f"{file_label(path)} is empty (no header line)", "point at the CSV export."
        )
    return row


def _check_unique(names: list[str], path: Path) -> None:
    seen: dict[str, int] = {}
    for i, name in enumerate(names, 1):
        if name in seen:
            raise InputError(
                f"{file_label(path)}: columns {seen[name]} and {i} are both named `{name}`",
                "rename one of them in the header.",
            )
        seen[name] = i


def _cells(path: Path, width: int) -> list[pa.Array]:
    """Every column as text: trimmed, with empty cells as null."""
    columns = [f"c{i}" for i in range(width)]
    try:
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=columns, skip_rows=1),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(columns, pa.string()),
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=True,
            ),
        )
    except OSError as exc:
        if isinstance(exc, pa.ArrowException):
            raise unreadable(path, "CSV", exc) from None
        raise cannot_open(path, exc) from None
    except pa.ArrowException as exc:
        raise unreadable(path, "CSV", exc) from None
    return [_trimmed(table.column(i).combine_chunks()) for i in range(width)]


def _trimmed(column: pa.Array) -> pa.Array:
    text = pc.utf8_trim_whitespace(column)
    return pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)


def parse_step(text: str) -> int | None:
    """A whole number written as an integer or as a float (``3``, ``3.0``, ``3e2``); None for
    anything else (``3.5``, ``NaN``, text, out of the int64 range)."""
    if _INTEGER_RE.fullmatch(text):
        value = int(text)
    elif _NUMBER_RE.fullmatch(text):
        number = float(text)
        if not (math.isfinite(number) and number.is_integer()):
            return None
        value = int(number)
    else:
        return None
    return value if -INT64_LIMIT <= value < INT64_LIMIT else None


def _steps(
    column: pa.Array, path: Path, step: str, names: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """The step of every row (0 where missing) and which rows have one."""
    texts = column.to_pylist()
    steps = np.zeros(len(texts), dtype=np.int64)
    has_step = np.zeros(len(texts), dtype=bool)
    for i, text in enumerate(texts):
        if text is None:
            continue
        value = parse_step(text)
        if value is None:
            raise InputError(
                f"{file_label(path)}: data row {i + 1}: step column `{step}` holds {shorten(text)}, "
                "expected a whole number",
                "the step column must hold whole numbers; name another one with --step-column.",
            )
        steps[i], has_step[i] = value, True
    if not has_step.any():
        what = "has no data rows" if not texts else f"has no value in column `{step}` in any row"
        raise InputError(
            f"{file_label(path)} {what}, so no step",
            f"name the column that holds the step with --step-column (columns: {listing(names)}).",
        )
    return steps, has_step


def _note_stepless(has_step: np.ndarray, step: str, found: Found) -> None:
    rows = np.flatnonzero(~has_step) + 1
    if not len(rows):
        return
    found.excluded[ROW_WITHOUT_STEP] += len(rows)
    found.notes.append(
        f"excluded {count(len(rows), 'row')} without a value in the step column `{step}` "
        f"(data row {numbers(rows.tolist())}) with every value they hold"
    )


def _layout(others: list[str], step: str, path: Path, found: Found) -> dict[str, str]:
    """Source column -> metric name: the W&B chart prefix stripped and its min/max companion
    columns dropped (both noted)."""
    prefix = chart_prefix(others)
    names = {n: n[len(prefix) :] for n in others} if prefix else {n: n for n in others}
    if prefix:
        found.notes.append(
            f"stripped the prefix `{prefix}` that every metric column carries "
            "(a W&B chart export names its columns `<run name> - <metric>`)"
        )
    if step in names.values():
        raise InputError(
            f"{file_label(path)}: column `{step}` appears twice once the prefix `{prefix}` is stripped",
            "name the step column with --step-column, or rename the columns in the header.",
        )
    companions = companion_columns(list(names.values()))
    if companions:
        found.excluded[COMPANION] += len(companions)
        found.notes.append(
            f"excluded {count(len(companions), 'min/max companion column')} of a W&B chart export "
            f"(the range around each line, not values of the run): {listing(companions)}"
        )
    dropped = set(companions)
    return {source: name for source, name in names.items() if name not in dropped}


def _column(column: pa.Array, steps: np.ndarray, has_step: np.ndarray) -> Values | NonNumeric:
    """The numeric values of the rows with a step, or why the column is not numeric."""
    numeric = pc.fill_null(pc.match_substring_regex(column, f"^{NUMBER}$"), True)
    bad = np.flatnonzero(~numeric.to_numpy(zero_copy_only=False))
    if len(bad):
        first = int(bad[0])
        text = column[first].as_py()
        return NonNumeric(NON_NUMERIC, f"e.g. {shorten(text)} in data row {first + 1}")
    present = column.is_valid().to_numpy(zero_copy_only=False) & has_step
    values = pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)
    return Values(steps[present], values[present].astype(np.float64))
