"""A result's JSON, derived from its fields: one walker for every result.

A result is a frozen dataclass whose fields, in their order, are what its JSON writes; a field's
metadata says how (``member``): under another key, left out when None or empty, through a form
(``[g for split in groups.values() for g in split]``), or its own fields written in its place
(``flat``); an ``internal()`` field is for the sections and the callers only. A nested result
is walked the same way; a value that still writes its own JSON (``to_dict``) is asked for it.
Numbers are left as they are (numpy's as Python's): ``render/json.py`` writes them (NaN and
infinities as null)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import MISSING, field
from typing import Any, ClassVar

# What a field's metadata says of its JSON.
_KEY, _OMIT, _FLAT, _FORM, _INTERNAL = "json_key", "json_omit", "json_flat", "json_form", "internal"
NONE, EMPTY = "none", "empty"  # left out when None; when None or empty (no notes, no curves)

_PLAIN = frozenset({str, int, float, bool, type(None)})
Cell = str | int | float | bool | None  # a value of a row a listing writes as it is
Row = dict[str, Cell | list[Cell]]  # a token, a sequence row: its columns by name


def member(
    *,
    key: str | None = None,
    omit: str | None = None,
    flat: bool = False,
    form: Callable[[Any], object] | None = None,
    default: object = MISSING,
    default_factory: Callable[[], object] | Any = MISSING,
) -> Any:
    """A field as the JSON writes it: under ``key`` (its name by default), left out when it is
    None (``omit=NONE``) or None or empty (``omit=EMPTY``), its value through ``form`` first
    (a value other than None), and with ``flat`` its own fields (or keys) in its place rather than under its name."""
    meta: dict[str, object] = {}
    if key is not None:
        meta[_KEY] = key
    if omit is not None:
        meta[_OMIT] = omit
    if flat:
        meta[_FLAT] = True
    if form is not None:
        meta[_FORM] = form
    return field(default=default, default_factory=default_factory, metadata=meta)  # type: ignore[call-overload]


def internal(*, default: object = MISSING, default_factory: Any = MISSING) -> Any:
    """A field the JSON does not write: what the sections or the callers read beside it (the
    selection, the mergeable states, the figures' data)."""
    return field(default=default, default_factory=default_factory, metadata={_INTERNAL: True})  # type: ignore[call-overload]


class JsonForm:
    """A result whose JSON (``to_dict``) is its fields walked by :func:`fields_json`, under the
    one key ``JSON_ROOT`` when it names one (``{"show": {...}}``)."""

    JSON_ROOT: ClassVar[str | None] = None

    def to_dict(self) -> dict[str, Any]:
        out = fields_json(self)
        return out if self.JSON_ROOT is None else {self.JSON_ROOT: out}


def fields_json(result: object) -> dict[str, Any]:
    """The JSON object of a dataclass: its fields in order, as their metadata says."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(result):  # type: ignore[arg-type]
        meta = f.metadata
        if meta.get(_INTERNAL):
            continue
        value = getattr(result, f.name)
        form = meta.get(_FORM)
        if form is not None and value is not None:  # None is written (or left out) as it is
            value = form(value)
        omit = meta.get(_OMIT)
        if value is None and (omit is not None or meta.get(_FLAT)):
            continue
        if omit == EMPTY and not value:
            continue
        if meta.get(_FLAT):
            out.update(to_json(value))
        else:
            out[meta.get(_KEY, f.name)] = to_json(value)
    return out


def to_json(value: Any) -> Any:
    """A value as the JSON writes it: results and other dataclasses as objects of their fields,
    tuples and arrays as lists, dicts key by key; a value with its own ``to_dict`` by it."""
    if type(value) in _PLAIN:  # most values (a listing's 10^4 rows): as they are, at once
        return value
    to_dict = getattr(value, "to_dict", None)
    if to_dict is not None and not isinstance(value, type):
        return to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return fields_json(value)
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    tolist = getattr(value, "tolist", None)  # a numpy array or scalar
    return tolist() if tolist is not None else value
