"""What the Parquet sequence layout holds beside the roles: each sequence's prompt length (for
``kv_position``) and its attributes (``data_source``, ``dp_rank``...).

The prompt length, in this order: a per-row integer column (``prompt_length``, what
``mismatchctl.dump`` writes, ``prompt_len``, ``prompt_lengths``); the prompt part of an
``attention_mask`` spanning prompt + response (verl's trainer batch: the prompt is left-padded,
its ones are the prompt's tokens); the length of a prompt token-id list column (``prompts``,
``prompt_ids``, ``prompt_token_ids``), ragged (a padded one needs the attention mask). Attributes:
``ingest.attributes``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mismatchctl.columns import arrow_of, list_lengths, valid_of
from mismatchctl.errors import InputError
from mismatchctl.ingest import arrow_values as av
from mismatchctl.ingest import attributes as attr

PROMPT_LENGTH_NAMES = ("prompt_length", "prompt_len", "prompt_lengths")
PROMPT_LIST_NAMES = ("prompts", "prompt_ids", "prompt_token_ids")
UNKNOWN = -1


@dataclass
class Extras:
    """The prompt-length column (an integer column, or a prompt list column) and the
    attributes kept, with their values for the whole file."""

    prompt_length: str | None = None
    prompt_list: str | None = None
    attributes: dict[str, list[attr.Text]] = field(default_factory=dict)


def find_extras(
    pf: pq.ParquetFile,
    used: set[str],
    requested: Sequence[str],
    label: str,
    notes: list[str],
) -> Extras:
    """The file's prompt-length column and attributes (``used``: the columns of the roles and
    the attention mask, never attributes)."""
    schema = pf.schema_arrow
    out = Extras()
    for name in PROMPT_LENGTH_NAMES:
        if name in schema.names and name not in used:
            if not pa.types.is_integer(schema.field(name).type):
                raise InputError(
                    f"{label}: column `{name}` is {schema.field(name).type}, expected one integer "
                    "per response (the tokens before its first position)",
                    "write the prompt lengths as integers, or rename the column.",
                )
            out.prompt_length = name
            break
    for name in PROMPT_LIST_NAMES:
        if name in schema.names and name not in used and av.is_list_type(schema.field(name).type):
            out.prompt_list = name
            break
    taken = used | {n for n in (out.prompt_length, out.prompt_list) if n}
    out.attributes = _attributes(pf, taken, requested, label, notes)
    return out


def _attributes(
    pf: pq.ParquetFile, taken: set[str], requested: Sequence[str], label: str, notes: list[str]
) -> dict[str, list[attr.Text]]:
    schema = pf.schema_arrow
    names = [
        f.name
        for f in schema
        if f.name not in taken and _scalar_type(f.type, floats=f.name in requested)
    ]
    attr.check_requested(requested, names, label)
    if not names:
        return {}
    table = pf.read(columns=names)
    candidates = {name: _texts(table.column(name)) for name in names}
    return attr.choose(candidates, requested, label, notes)


def _scalar_type(t: pa.DataType, floats: bool) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t):
        return True
    return pa.types.is_boolean(t) or (floats and pa.types.is_floating(t))


def _texts(column: pa.ChunkedArray) -> list[attr.Text]:
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    return [attr.as_text(v) for v in column.to_pylist()]


def prompt_lengths(
    record: pa.RecordBatch, extras: Extras, attention: np.ndarray | None, label: str
) -> np.ndarray | None:
    """Each row's prompt length (``UNKNOWN`` where the file does not say): from the integer
    column, else the attention mask's prompt part (``attention``: its per-row count, UNKNOWN for
    a row without a prompt part), else the length of the prompt list."""
    if extras.prompt_length is not None:
        column = record.column(extras.prompt_length)
        what = f"{label}: column `{extras.prompt_length}`"
        values = av.ints(av.filled(column, UNKNOWN), what)
        bad = np.flatnonzero((values < 0) & valid_of(column))
        if len(bad):
            raise InputError(
                f"{what}: row {int(bad[0])} is {int(values[bad[0]])} (expected the number of "
                "prompt tokens, >= 0)",
                "write each response's prompt length, or null where it is unknown.",
            )
        return values
    if attention is not None:
        return attention
    if extras.prompt_list is not None:
        column = record.column(extras.prompt_list)
        return list_lengths(column, fill=UNKNOWN)
    return None


def prompt_ids(
    record: pa.RecordBatch, extras: Extras, outside: np.ndarray | None, label: str
) -> tuple[np.ndarray, np.ndarray] | None:
    """The prompt list's token ids (flat) and per-row offsets, for the rows whose list is their
    whole prompt (as long as the prompt the arrays leave out, ``outside``); a null list, or one
    of another length (a padded prompt), gives none."""
    if extras.prompt_list is None or outside is None:
        return None
    column = record.column(extras.prompt_list)
    lengths = list_lengths(column, fill=0)
    whole = lengths == outside
    if not whole.any():
        return None
    flat = pc.list_flatten(column.filter(arrow_of(whole)))
    if flat.null_count or not pa.types.is_integer(flat.type):  # not token ids: none kept
        return None
    values = av.ints(flat, f"{label}: column `{extras.prompt_list}`")
    counts = np.where(whole, lengths, 0).astype(np.int64)
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return values.astype(np.int64), offsets
