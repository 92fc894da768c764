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


def dumps(value: Any) -> str:
    """Indented JSON, non-ASCII text as it is, but no raw control character (``display``)."""
    return json_safe(json.dumps(to_jsonable(value), indent=2, allow_nan=False, ensure_ascii=False))


def dumps_line(value: Any) -> str:
    """One line of JSON (a JSON lines record), escaped like :func:`dumps`."""
    return json_safe(json.dumps(to_jsonable(value), allow_nan=False, ensure_ascii=False))
