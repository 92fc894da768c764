"""Training curves from JSON lines, as console and file loggers write them: one object per line,
``{"step": 3, "actor": {"grad_norm": 0.5}, "critic/score/mean": 0.1}``.

Nested objects are flattened with ``/`` (``actor/grad_norm``); blank lines are skipped. A missing
key or a ``null`` means "not logged at this step". Numbers are the metric values (JSON has no
NaN or infinity, but Python's ``json`` writes them as ``NaN`` / ``Infinity`` / ``-Infinity`` and
they are kept); a key that holds anything else on any line (text, a boolean, a list, an empty
object) is a non-numeric column. Line numbers count every line of the file from 1.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from mismatchctl.curves.names import (
    NON_NUMERIC,
    ROW_WITHOUT_STEP,
    Found,
    NonNumeric,
    Values,
    cannot_open,
    clean_name,
    count,
    cut,
    find_step_column,
    is_internal,
    listing,
    numbers,
)
from mismatchctl.display import file_label
from mismatchctl.errors import InputError

INT64_LIMIT = 2**63
Record = tuple[int, dict[str, Any]]  # (line number, flattened object)


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def read_jsonl_metrics(path: Path, step_column: str | None) -> Found:
    """Read ``path``; see the module docstring."""
    records = _records(path)
    keys = list(dict.fromkeys(key for _, flat in records for key in flat))
    step = find_step_column(keys, step_column, file_label(path), "key")
    found = Found(step, {})
    steps = [_step_of(flat.get(step), line, path, step) for line, flat in records]
    stepless = [line for (line, _), s in zip(records, steps, strict=True) if s is None]
    if len(stepless) == len(records):
        raise InputError(
            f"{file_label(path)}: no line has a value for the step key `{step}`",
            f"name the key that holds the step with --step-column (keys: {listing(keys)}).",
        )
    if stepless:
        found.excluded[ROW_WITHOUT_STEP] += len(stepless)
        found.notes.append(
            f"excluded {count(len(stepless), 'line')} without a value for the step key "
            f"`{step}` (line {numbers(stepless)}) with every value they hold"
        )
    found.columns = _columns(records, steps, step, keys)
    found.internal = {key for key in found.columns if is_internal(key, step)}
    return found


def _records(path: Path) -> list[Record]:
    records: list[Record] = []
    try:
        with path.open("rb") as fh:
            for number, raw in enumerate(fh, 1):
                if raw.strip():
                    records.append((number, _flatten(_parse(raw, path, number), path, number)))
    except OSError as exc:
        raise cannot_open(path, exc) from None
    if not records:
        raise InputError(f"{file_label(path)} holds no JSON lines", "point at the metrics log.")
    return records


def _parse(raw: bytes, path: Path, number: int) -> dict[str, Any]:
    try:
        obj = json.loads(raw.rstrip(b"\r\n"), object_pairs_hook=_object)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{file_label(path)}: line {number} is not valid JSON ({exc.msg} at column {exc.pos + 1})",
            "the file is truncated or corrupt; repair or remove that line.",
        ) from None
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{file_label(path)}: line {number} is not UTF-8 text ({exc.reason})",
            "the file is truncated or corrupt; repair or remove that line.",
        ) from None
    except _DuplicateKey as exc:
        raise InputError(
            f"{file_label(path)}: line {number} holds the key `{exc.key}` twice in one object",
            "fix the logger so that each key appears once.",
        ) from None
    if not isinstance(obj, dict):
        raise InputError(
            f"{file_label(path)}: line {number} is a JSON {_kind(obj)}, expected an object",
            'every line must be one JSON object, e.g. {"step": 1, "loss": 0.5}.',
        )
    return obj


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "boolean" if isinstance(value, bool) else "number"


def _flatten(obj: dict[str, Any], path: Path, number: int) -> dict[str, Any]:
    """Nested objects -> ``a/b/c`` keys; an empty object stays a (non-numeric) value."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, node: dict[str, Any]) -> None:
        for key, value in node.items():
            raw = f"{prefix}/{key}" if prefix else key
            if isinstance(value, dict) and value:
                walk(raw, value)
                continue
            name = clean_name(raw, f"{file_label(path)}: line {number}")
            if name in flat:
                raise InputError(
                    f"{file_label(path)}: line {number}: the key `{name}` appears twice once nested "
                    "objects are flattened with `/`",
                    "fix the logger so that each metric has one name.",
                )
            flat[name] = value

    walk("", obj)
    return flat


def _step_of(value: Any, line: int, path: Path, step: str) -> int | None:
    """The step of one line: None when missing or null; InputError unless a whole number."""
    if value is None:
        return None
    whole: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        whole = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        whole = int(value)
    if whole is not None and -INT64_LIMIT <= whole < INT64_LIMIT:
        return whole
    raise InputError(
        f"{file_label(path)}: line {line}: step `{step}` is {cut(json.dumps(value))}, "
        "expected a whole number",
        "the step key must hold whole numbers; name another one with --step-column.",
    )


def _number(value: Any) -> float | None:
    """A JSON number as a float; None for anything else (booleans included)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer beyond the float range
        return None


def _columns(
    records: list[Record], steps: list[int | None], step: str, keys: list[str]
) -> dict[str, Values | NonNumeric]:
    """One pass over the lines: the values of every key, in file order."""
    collected: dict[str, tuple[list[int], list[float]]] = {k: ([], []) for k in keys if k != step}
    bad: dict[str, NonNumeric] = {}
    for (line, flat), s in zip(records, steps, strict=True):
        for key, value in flat.items():
            if key == step or value is None or key in bad:
                continue
            number = _number(value)
            if number is None:
                example = cut(json.dumps(value, ensure_ascii=False))
                bad[key] = NonNumeric(NON_NUMERIC, f"e.g. {example} on line {line}")
            elif s is not None:
                collected[key][0].append(s)
                collected[key][1].append(number)
    return {
        key: bad.get(key)
        or Values(np.array(got[0], dtype=np.int64), np.array(got[1], dtype=np.float64))
        for key, got in collected.items()
    }
