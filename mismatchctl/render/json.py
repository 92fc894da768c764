"""Plain JSON: dataclasses and numpy values converted, NaN and infinities as null."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from mismatchctl.display import json_safe

_PLAIN = (str, int, bool, type(None))


def to_jsonable(value: Any) -> Any:
    kind = type(value)
    if kind in _PLAIN:  # most values: returned as they are, without the checks below
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value) if isinstance(value, set | frozenset) else value
        return [to_jsonable(v) for v in items]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and not isinstance(value, str | bytes):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


_ENCODE = json.JSONEncoder(allow_nan=False, ensure_ascii=False).encode  # the C encoder
_CONTAINERS = (dict, list)


def dumps(value: Any) -> str:
    """Indented JSON, non-ASCII text as it is, but no raw control character (``display``).

    Objects are indented two spaces a level; a list of plain values, and each item of a list
    that holds no deeper object or list (a token, a point, a step's row), is written on one
    line: readable, and written by json's C encoder (``indent`` would run its Python one, 10x
    slower on the 10^4-row lists of `show` and `tokens`)."""
    return json_safe(_indented(to_jsonable(value), "\n"))


def _indented(value: Any, newline: str) -> str:
    if isinstance(value, dict):
        if not value:
            return "{}"
        inner = newline + "  "
        items = [f"{_ENCODE(k)}: {_indented(v, inner)}" for k, v in value.items()]
        return "{" + inner + ("," + inner).join(items) + newline + "}"
    if isinstance(value, list):
        if not value or not any(isinstance(v, _CONTAINERS) for v in value):
            return _ENCODE(value)
        inner = newline + "  "
        items = [_indented(v, inner) if _deep(v) else _ENCODE(v) for v in value]
        return "[" + inner + ("," + inner).join(items) + newline + "]"
    return _ENCODE(value)


def _deep(value: Any) -> bool:
    """An object or list holding an object or a list."""
    if isinstance(value, dict):
        return any(isinstance(v, _CONTAINERS) for v in value.values())
    return isinstance(value, list) and any(isinstance(v, _CONTAINERS) for v in value)


def dumps_line(value: Any) -> str:
    """One line of JSON (a JSON lines record), escaped like :func:`dumps`."""
    return json_safe(json.dumps(to_jsonable(value), allow_nan=False, ensure_ascii=False))
