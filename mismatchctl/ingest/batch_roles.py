"""The batch a sequence was computed in: ``batch_id`` and ``batch_size`` of the sequence rows.

Both are per-sequence integers that the dumps write as ordinary per-sequence columns, which every
reader already collects as attributes (``ingest.attributes``). So they are read from there: the
column named by ``--map batch_id=COL`` / ``--map batch_size=COL``, else the first of the usual
names the file has. Those columns are always kept as attributes, whatever their number of
values (a batch id per micro-batch easily has more than an attribute's 64), so ``attr:batch_id``
keeps working as it did. A value that is not an integer (>= 0 for an id, >= 1 for a size) is a
bad sample, refused (or dropped with ``--skip-bad``) as any bad value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from mismatchctl import schema as S
from mismatchctl.ingest.source import Source

# the usual names of each role, first match wins (a DumpWriter `attrs` column, a Monitor's)
NAMES: dict[str, tuple[str, ...]] = {
    S.ROLE_BATCH_ID: ("batch_id", "micro_batch_id", "batch_idx"),
    S.ROLE_BATCH_SIZE: ("batch_size", "micro_batch_size"),
}
ALWAYS_KEPT = frozenset(n for names in NAMES.values() for n in names)
MINIMUM = {S.ROLE_BATCH_ID: 0, S.ROLE_BATCH_SIZE: 1}

Problem = tuple[str, str]


def split_mapping(mapping: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``--map`` as (the roles the readers read, the batch roles read from the attributes)."""
    rest = {r: c for r, c in mapping.items() if r not in S.BATCH_ROLES}
    return rest, {r: c for r, c in mapping.items() if r in S.BATCH_ROLES}


def resolve(attributes: Sequence[str], mapping: Mapping[str, str]) -> dict[str, str]:
    """Role -> the attribute column it is read from, for the roles the source has."""
    found = {}
    for role in S.BATCH_ROLES:
        names = (mapping[role],) if role in mapping else NAMES[role]
        column = next((n for n in names if n in attributes), None)
        if column is not None:
            found[role] = column
    return found


def attach(source: Source, mapping: Mapping[str, str]) -> Source:
    """``source`` with its batch roles resolved (``resolve``) from its attributes and ``--map``,
    listed among its columns (the catalog's role -> column of the file): every opened source goes
    through this, read from a file or handed over in memory."""
    source.batch_columns = resolve(source.attributes, split_mapping(mapping)[1])
    source.columns.update(source.batch_columns)
    return source


def parse(values: Sequence[str | None], role: str) -> tuple[np.ndarray, dict[int, Problem]]:
    """The column's values as int64 (-1 where null) and the samples whose value is no integer
    of the role's range."""
    out = np.full(len(values), -1, dtype=np.int64)
    bad: dict[int, Problem] = {}
    least = MINIMUM[role]
    for i, text in enumerate(values):
        if text is None:
            continue
        number = _integer(text)
        if number is None or number < least:
            bad[i] = (
                f"{role} not an integer >= {least}",
                f"{role} {text!r} (expected an integer >= {least})",
            )
            continue
        out[i] = number
    return out, bad


def _integer(text: str) -> int | None:
    """An attribute's text as an integer: ``12``, or a float's ``12.0`` (a float column)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    if not value.is_integer() or abs(value) > 2**53:
        return None
    return int(value)
