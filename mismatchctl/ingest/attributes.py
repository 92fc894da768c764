"""Per-sequence attributes of a dump (``data_source``, ``env``, ``task``, ``dp_rank``...): which
columns are kept, and their values as text.

Kept automatically: every per-sequence scalar column of text, integers or booleans that no role
uses and that holds at most ``MAX_DISTINCT`` distinct values in the file (an id column has
thousands: it is left out, and the source's notes say so); a value longer than ``MAX_TEXT``
characters or with control characters leaves its column out too (free text, not a category).
``--attr COLUMN`` keeps a column whatever its number of values (floats included); a named
column that is missing, not one value per sequence, or holds such text is an error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from mismatchctl.display import has_control, shown
from mismatchctl.errors import InputError
from mismatchctl.ingest.batch_roles import ALWAYS_KEPT

MAX_DISTINCT = 64  # distinct values of an automatically kept attribute, in one file
MAX_TEXT = 200  # characters of an attribute value
MAX_NOTED = 5  # left-out columns named in a note
# an attribute's name: a column name of the store (``attr.<name>``) and a split key
ATTR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")

Text = str | None


def as_text(value: Any) -> Text:
    """One attribute value as text: ints and text as they are, booleans ``true`` / ``false``,
    floats as Python writes them (``0.7``); None (and a NaN) for a null."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def is_scalar(value: Any, floats: bool) -> bool:
    """Whether a Python value can be an attribute (floats only when named with ``--attr``)."""
    if value is None or isinstance(value, bool | np.bool_ | str | int | np.integer):
        return True
    return floats and isinstance(value, float | np.floating)


def choose(
    candidates: dict[str, list[Text]],
    requested: Sequence[str],
    label: str,
    notes: list[str],
) -> dict[str, list[Text]]:
    """The attributes kept among ``candidates`` (column -> its values as text, one per sequence
    of the whole file, in order): every requested one (checked), and the unrequested ones with
    at most ``MAX_DISTINCT`` values and no free text. What is left out is noted."""
    kept: dict[str, list[Text]] = {}
    many: list[str] = []
    for name, values in candidates.items():
        problem = text_problem(values)
        if name in requested:
            if problem is not None:
                raise InputError(
                    f"{label}: column `{name}` (--attr {name}): {problem}",
                    "name a column of short categories (a source, a task, a rank), or leave "
                    f"--attr {name} out.",
                )
            kept[name] = values
            continue
        distinct = len({v for v in values if v is not None})
        # the batch columns are read from the attributes whatever their number of values
        few = distinct <= MAX_DISTINCT or name in ALWAYS_KEPT
        if problem is None and few and _valid_name(name):
            kept[name] = values
        elif problem is None and _valid_name(name):
            many.append(f"`{name}` ({distinct:,} values)")
    if many:
        more = f" and {len(many) - MAX_NOTED} more" if len(many) > MAX_NOTED else ""
        notes.append(
            f"not kept as attributes (more than {MAX_DISTINCT} distinct values): "
            f"{', '.join(many[:MAX_NOTED])}{more}; --attr COLUMN keeps one"
        )
    if kept:
        notes.append("attributes: " + ", ".join(f"`{n}`" for n in kept))
    return kept


def text_problem(values: list[Text]) -> str | None:
    for i, v in enumerate(values):
        if v is not None and (len(v) > MAX_TEXT or has_control(v)):
            what = f"{len(v)} characters" if len(v) > MAX_TEXT else "control characters"
            return (
                f"sequence {i} holds {shown(v, 60)} ({what}; an attribute is a short, printable "
                f"category of at most {MAX_TEXT} characters)"
            )
    return None


def _valid_name(name: str) -> bool:
    """Attribute names are split keys (``attr:NAME``) and column names of the store."""
    return bool(ATTR_NAME.fullmatch(name))


def check_names(requested: Sequence[str]) -> None:
    """Every ``--attr`` is a name an attribute can have."""
    for name in requested:
        if not _valid_name(name):
            raise InputError(
                f"--attr {shown(name, 60)}: not a simple column name",
                "attributes are named by letters, digits, `_`, `.` and `-` (at most 64 "
                "characters, not starting with a digit).",
            )


def check_requested(requested: Sequence[str], available: Sequence[str], label: str) -> None:
    """Every ``--attr`` names a column (key) of the file that can be an attribute."""
    check_names(requested)
    for name in requested:
        if name not in available:
            detail = (
                f"{label} has no per-sequence scalar column `{name}` (candidates: "
                f"{', '.join(available) or 'none'})"
            )
            raise MissingColumn(name, detail)


class MissingColumn(InputError):
    """A requested attribute (``--attr``, or the column ``--map`` reads a batch role from,
    kept as an attribute) that the file has no per-sequence scalar column of."""

    def __init__(self, name: str, detail: str) -> None:
        hint = "name a column of one text, integer, boolean or float value per sequence."
        super().__init__(f"--attr {name}: {detail}", hint)
        self.name, self.detail = name, detail

    def __reduce__(self) -> tuple:
        return (self.__class__, (self.name, self.detail))

    def as_map(self, role: str, usual: Sequence[str]) -> InputError:
        """The same error worded for ``--map ROLE=COLUMN``."""
        return InputError(
            f"--map {role}={self.name}: {self.detail}",
            f"name the column of one integer per sequence that holds the {role}, or leave "
            f"--map {role} out to read it from a column of a usual name ({', '.join(usual)}).",
        )


def from_records(
    records: Sequence[dict],
    exclude: set[str],
    requested: Sequence[str],
    label: str,
    notes: list[str],
    auto: bool = True,
) -> dict[str, list[Text]]:
    """The attributes of dict records (one per sequence: slime samples), from the keys whose
    values are all scalars; ``auto``: also the keys not requested (else only the requested)."""
    keys = [k for k in (records[0] if records else {}) if isinstance(k, str) and k not in exclude]
    candidates: dict[str, list[Text]] = {}
    for key in keys:
        floats = key in requested
        values = [r.get(key) for r in records]
        if all(is_scalar(v, floats) for v in values) and (auto or key in requested):
            candidates[key] = [as_text(v) for v in values]
    check_requested(requested, list(candidates), label)
    return choose(candidates, requested, label, notes)


def requested_value(value: Any, name: str, where: str) -> Text:
    """One sequence's value of a requested attribute (a format read line by line: NeMo-RL,
    prime-rl), checked: a scalar of short, printable text."""
    if not is_scalar(value, floats=True):
        raise InputError(
            f"{where}: `{name}` (--attr {name}) is {type(value).__name__}, expected one text, "
            "integer, boolean or float value per sequence",
            f"name a per-sequence scalar, or leave --attr {name} out.",
        )
    text = as_text(value)
    problem = text_problem([text])
    if problem is not None:
        raise InputError(f"{where}: `{name}` (--attr {name}): {problem}", "leave it out.")
    return text


def per_batch(kept: dict[str, list[Text]], start: int, end: int) -> dict[str, list[Text]]:
    """The attributes of the sequences ``start:end`` of the file."""
    return {name: values[start:end] for name, values in kept.items()}
