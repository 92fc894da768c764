"""Per-response inputs of ``DumpWriter.add`` (ids, rewards, versions, gpus, extra attributes) as
Arrow arrays of one value per row, checked so that ``ingest`` reads back exactly what was given."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from mismatchctl.display import has_control, shown
from mismatchctl.dump.arrays import is_tensor, to_numpy
from mismatchctl.dump.layout import reserved
from mismatchctl.errors import UsageError
from mismatchctl.ingest.attributes import ATTR_NAME

_SCALAR = (str, int, float, bool, np.generic)


def values_of(value: Any, name: str, rows: int) -> list[Any]:
    """One Python value per row: a scalar is repeated, a sequence must have ``rows`` values."""
    if isinstance(value, _SCALAR):
        return [value.item() if isinstance(value, np.generic) else value] * rows
    arr = to_numpy(value) if is_tensor(value) else value
    if isinstance(arr, np.ndarray):
        if arr.ndim != 1:
            raise UsageError(
                f"{name}: shape {arr.shape}, expected ({rows},): one value per response",
                f"pass {name} as a single value or a list of {rows} values.",
            )
        arr = arr.tolist()
    try:
        out = list(arr)
    except TypeError:
        raise UsageError(
            f"{name}: expected a value or one value per response, found {type(value).__name__}",
            f"pass {name} as a single value or a list of {rows} values.",
        ) from None
    if len(out) != rows:
        raise UsageError(
            f"{name}: {len(out)} values, expected one per response ({rows})",
            f"pass {name} as a single value or a list of {rows} values.",
        )
    return [v.item() if isinstance(v, np.generic) else v for v in out]


def sample_ids(value: Any, rows: int) -> pa.Array:
    """Ids as text (strings, integers or UUIDs); empty ids and control characters refused."""
    if isinstance(value, _SCALAR):
        raise UsageError(
            f"sample_ids: a single value {shown(repr(value), 60)}, expected one id per response",
            f"pass a list of {rows} ids.",
        )
    ids = values_of(value, "sample_ids", rows)
    out = []
    for i, v in enumerate(ids):
        if isinstance(v, bool) or not isinstance(v, (str, int, uuid.UUID)):
            raise UsageError(
                f"sample_ids: row {i} is {type(v).__name__} {shown(repr(v), 60)} "
                "(expected a string, an integer or a UUID)",
                "pass one id per response.",
            )
        out.append(_text(str(v), "sample_ids", i))
    return pa.array(out, pa.string())


def gpus(value: Any, rows: int) -> pa.Array:
    """A gpu name for every row (one name, or one per row; None where unknown)."""
    names = values_of(value, "gpu", rows)
    out = []
    for i, v in enumerate(names):
        if v is not None and not isinstance(v, str):
            raise UsageError(
                f"gpu: row {i} is {type(v).__name__} (expected a name such as `H20`, or None)",
                "pass the gpu name as text.",
            )
        out.append(None if v is None else _text(v, "gpu", i))
    return pa.array(out, pa.string())


def _text(text: str, name: str, row: int) -> str:
    if not text.strip() or has_control(text):
        what = "empty" if not text.strip() else f"{shown(text, 60)} holds control characters"
        raise UsageError(
            f"{name}: row {row} is {what} (expected printable, non-empty text)",
            f"{name} values are shown in terminals and reports: pass printable text.",
        )
    return text


def rewards(value: Any, rows: int) -> pa.Array:
    """One number per row as float64 (NaN: unknown, as ingest reads it)."""
    arr = to_numpy(value)
    if arr.shape != (rows,) or arr.dtype.kind not in "iuf":
        found = f"shape {arr.shape}, dtype {arr.dtype}"
        raise UsageError(
            f"rewards: {found}, expected ({rows},) numbers: one per response",
            "pass one reward per response (e.g. verl's token_level_scores.sum(-1)).",
        )
    return pa.array(arr.astype(np.float64))


def weight_versions(value: Any, rows: int) -> pa.Array:
    """The policy version that sampled each row: one integer, or one per row (None: unknown)."""
    versions = values_of(value, "weight_version", rows)
    for i, v in enumerate(versions):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise UsageError(
                f"weight_version: row {i} is {type(v).__name__} {shown(repr(v), 40)} "
                "(expected an integer, or None)",
                "pass the policy (weight) version as an integer: the step whose weights sampled it.",
            )
    return pa.array(versions, pa.int64())


def attributes(attrs: Mapping[str, Any], rows: int) -> dict[str, pa.Array]:
    """Extra per-response columns (e.g. ``data_source``, ``dp_rank``): text, integers, floats or
    booleans, one value or one per row."""
    taken = reserved()
    out: dict[str, pa.Array] = {}
    for name, value in attrs.items():
        if not isinstance(name, str) or not ATTR_NAME.fullmatch(name):
            raise UsageError(
                f"attrs: name {shown(repr(name), 70)} is not a simple column name",
                "use letters, digits, `_`, `.` and `-` (at most 64 characters, not starting "
                "with a digit).",
            )
        if name in taken:
            raise UsageError(
                f"attrs: `{name}` is a column name ingest reads as a role (or one the dump "
                "writes anyway)",
                "give it through its own argument of add(), or choose another name.",
            )
        out[name] = _attribute(values_of(value, f"attrs[{name!r}]", rows), name)
    return out


def _attribute(values: list[Any], name: str) -> pa.Array:
    what = f"attrs[{name!r}]"
    kinds = {type(v) for v in values if v is not None}
    if not kinds:
        raise UsageError(f"{what}: every value is None", "leave the attribute out, or fill it.")
    if not kinds <= {str} and not kinds <= {int, float} and kinds != {bool}:
        names = ", ".join(sorted(k.__name__ for k in kinds))
        raise UsageError(
            f"{what}: values of types {names} (expected one kind: text, numbers or booleans)",
            "pass a value of one kind for every response.",
        )
    for i, v in enumerate(values):
        if isinstance(v, str):
            _text(v, what, i)
    return pa.array(values)
