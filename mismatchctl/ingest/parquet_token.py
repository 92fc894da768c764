"""Parquet token layout: one row per token (``step, sample_id, position, turn, ...``).

A sample's rows may be scattered through the file, so the needed columns of one file are read and
sorted by (step, sample id, position) before being cut into batches of whole sequences. Memory is
therefore bounded by the largest single file, not by the dump.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mismatchctl import schema as S
from mismatchctl.columns import arrow_as, arrow_of, numpy_of, valid_of
from mismatchctl.errors import InputError
from mismatchctl.ingest import arrow_values as av
from mismatchctl.ingest import attributes as attr
from mismatchctl.ingest.batch import (
    RaggedBatch,
    RouteColumn,
    offsets_from_lengths,
    sequence_index,
)
from mismatchctl.ingest.column_roles import TOKEN_NAMES, require, resolve, unique_names
from mismatchctl.ingest.parquet_extra import PROMPT_LENGTH_NAMES, UNKNOWN
from mismatchctl.ingest.source import (
    BATCH_TOKENS,
    Source,
    step_from_name,
    tags_from_metadata,
)
from mismatchctl.options import FORMAT_TOKEN


def open_token(
    path: Path, mapping: Mapping[str, str], label: str, attrs: Sequence[str] = ()
) -> Source:
    """``label``: the file as messages name it; ``attrs``: columns kept as attributes (one value
    per sequence, repeated on its rows). A ``prompt_length`` column (also one value per
    sequence) gives the prompt lengths."""
    pf = pq.ParquetFile(path)
    names = pf.schema_arrow.names
    unique_names(names, label)
    found = resolve(names, TOKEN_NAMES, mapping, label)
    require(found, (S.ROLE_ROLLOUT, S.ROLE_TRAINER), names, label)
    if S.ROLE_SAMPLE_ID not in found:
        raise InputError(
            f"no sample id column in {label} (found: {', '.join(names)}); one row per token "
            "needs it to know which tokens form a sequence",
            "name it with --map sample_id=<column>.",
        )
    source = Source(
        path, FORMAT_TOKEN, iter(()), found, tags_from_metadata(pf.schema_arrow.metadata)
    )
    step = 0
    if S.ROLE_STEP not in found:
        named = step_from_name(path, label)
        step = named if named is not None else 0
        if named is None:
            source.notes.append("no step column or step in the file name: rows counted as step 0")
    if S.ROLE_MASK not in found:
        source.notes.append("no mask column: every row counted as a model token")
    if S.ROLE_POSITION not in found:
        source.notes.append("no position column: tokens taken in file order within each sample")
    extra = _extra_columns(names, found, attrs, label, source.notes)
    source.attributes = list(attrs)
    source.batches = _batches(pf, label, found, step, extra)
    return source


def _extra_columns(
    names: list[str],
    found: Mapping[str, str],
    attrs: Sequence[str],
    label: str,
    notes: list[str],
) -> dict[str, str]:
    """Per-sequence columns read beside the roles: the prompt length (key ``prompt``) and the
    requested attributes (keys ``attr:<name>``), each one value per sequence."""
    used = set(found.values())
    attr.check_requested(attrs, [n for n in names if n not in used], label)
    extra = {f"attr:{a}": a for a in attrs}
    prompt = next((n for n in PROMPT_LENGTH_NAMES if n in names and n not in used), None)
    if prompt is not None:
        extra["prompt"] = prompt
        notes.append(f"prompt lengths: column `{prompt}`")
    else:
        notes.append("no prompt lengths: kv_position counts from the positions as given")
    return extra


def _batches(
    pf: pq.ParquetFile, label: str, found: Mapping[str, str], step: int, extra: dict[str, str]
) -> Iterator[RaggedBatch]:
    table = pf.read(columns=list(dict.fromkeys([*found.values(), *extra.values()])))
    table = _sorted(table, {**found, **extra}, step, label)
    keys = _sequence_starts(table, _step_what(label, found))
    starts = np.append(keys, table.num_rows)
    first = 0
    while first < len(keys):
        last = int(np.searchsorted(starts, starts[first] + BATCH_TOKENS, side="right")) - 1
        last = max(last, first + 1)
        lo, hi = int(starts[first]), int(starts[last])
        piece = table.slice(lo, hi - lo)
        batch = _to_batch(piece, starts[first : last + 1] - lo, label, found, lo)
        _per_sequence(batch, piece, starts[first : last + 1] - lo, extra, label)
        yield batch
        first = last


def _sorted(table: pa.Table, found: Mapping[str, str], step: int, label: str) -> pa.Table:
    """Canonical column names, sample ids as text, rows in (step, sample, position) order."""
    cols = {role: table.column(name) for role, name in found.items()}
    if S.ROLE_STEP not in cols:
        cols[S.ROLE_STEP] = arrow_of(np.full(table.num_rows, step, dtype=np.int64))
    cols[S.ROLE_SAMPLE_ID] = pc.cast(cols[S.ROLE_SAMPLE_ID], pa.string())
    nulls = cols[S.ROLE_SAMPLE_ID].null_count
    if nulls:
        first = int(np.flatnonzero(~valid_of(cols[S.ROLE_SAMPLE_ID]))[0])
        raise InputError(
            f"{label}: column `{found[S.ROLE_SAMPLE_ID]}`: {nulls} row(s) have no sample id "
            f"(first: row "
            f"{first}); in the token layout the sample id says which tokens form a sequence",
            "fill the ids, or name another id column with --map sample_id=COLUMN.",
        )
    cols["_row"] = arrow_of(np.arange(table.num_rows, dtype=np.int64))
    out = pa.table(cols)
    order = [(S.ROLE_STEP, "ascending"), (S.ROLE_SAMPLE_ID, "ascending")]
    order.append((S.ROLE_POSITION if S.ROLE_POSITION in cols else "_row", "ascending"))
    return out.sort_by(order)


def _step_what(label: str, found: Mapping[str, str]) -> str:
    column = found.get(S.ROLE_STEP)
    return f"{label}: column `{column}`" if column else f"{label}: step"


def _sequence_starts(table: pa.Table, step_what: str) -> np.ndarray:
    """Row indices where a new (step, sample id) begins."""
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    step = av.ints(table.column(S.ROLE_STEP).combine_chunks(), step_what)
    sample = table.column(S.ROLE_SAMPLE_ID).combine_chunks()
    codes = numpy_of(pc.dictionary_encode(sample).indices, fill=-1)
    change = np.ones(len(step), dtype=bool)
    change[1:] = (step[1:] != step[:-1]) | (codes[1:] != codes[:-1])
    return np.flatnonzero(change)


def _to_batch(
    t: pa.Table, starts: np.ndarray, label: str, found: Mapping[str, str], row0: int
) -> RaggedBatch:
    lengths = np.diff(starts)
    heads = starts[:-1]

    def col(role: str) -> pa.Array:
        return t.column(role).combine_chunks()

    def what(role: str) -> str:
        return f"{label}: column `{found[role]}`"

    sample_ids = col(S.ROLE_SAMPLE_ID).take(arrow_of(heads)).to_pylist()
    batch = RaggedBatch(
        steps=av.ints(col(S.ROLE_STEP), _step_what(label, found))[heads],
        sample_ids=sample_ids,
        offsets=offsets_from_lengths(lengths),
        rollout=av.floats(col(S.ROLE_ROLLOUT), what(S.ROLE_ROLLOUT)),
        trainer=av.floats(col(S.ROLE_TRAINER), what(S.ROLE_TRAINER)),
        locations=[f"rows of sample {s}" for s in sample_ids],
    )
    if S.ROLE_MASK in found:
        batch.mask = av.mask01(col(S.ROLE_MASK), what(S.ROLE_MASK))
    if S.ROLE_TOKENS in found:
        batch.token_ids = av.ints(col(S.ROLE_TOKENS), what(S.ROLE_TOKENS))
    if S.ROLE_POSITION in found:
        batch.position = av.ints(col(S.ROLE_POSITION), what(S.ROLE_POSITION)).astype(np.int32)
        _positions_once(batch, label, found)
    if S.ROLE_TURN in found:
        batch.turn = av.ints(col(S.ROLE_TURN), what(S.ROLE_TURN)).astype(np.int32)
    if S.ROLE_ENTROPY in found:
        batch.entropy = av.floats(col(S.ROLE_ENTROPY), what(S.ROLE_ENTROPY))
    if S.ROLE_GPU in found:
        batch.gpus = [g or None for g in av.strings(col(S.ROLE_GPU).take(arrow_of(heads)))]
    for role, member in ((S.ROLE_REWARD, "rewards"), (S.ROLE_WEIGHT_VERSION, "weight_versions")):
        if role in found:
            setattr(batch, member, av.floats(col(role).take(arrow_of(heads)), what(role)))
    for role in (S.ROLE_ROLLOUT_ROUTES, S.ROLE_TRAINER_ROUTES):
        if role in found:  # one [layers][top_k] list per row: a list of them per sequence
            per_seq = pa.ListArray.from_arrays(arrow_as(batch.offsets, pa.int32()), col(role))
            batch.routes[role] = RouteColumn(per_seq, found[role])
    return batch


def _per_sequence(
    batch: RaggedBatch, t: pa.Table, starts: np.ndarray, extra: dict[str, str], label: str
) -> None:
    """The prompt length and the attributes of each sequence: one value on all its rows (a
    column whose value changes within a sequence is an error naming it)."""
    heads = starts[:-1]
    for key, column in extra.items():
        values = t.column(key).combine_chunks()
        if pa.types.is_dictionary(values.type):
            values = values.cast(values.type.value_type)
        first = values.take(arrow_of(np.repeat(heads, np.diff(starts))))
        differs = av.filled(pc.not_equal(values, first), False)
        differs = pc.or_(differs, pc.xor(values.is_null(), first.is_null()))
        if pc.any(differs).as_py():
            row = int(np.flatnonzero(numpy_of(differs))[0])
            i = int(np.searchsorted(starts, row, side="right")) - 1
            raise InputError(
                f"{label}: column `{column}` changes within sample `{batch.sample_ids[i]}` "
                "(expected one value per sequence, repeated on its rows)",
                f"write one {column} per sequence, or leave it out.",
            )
        head = values.take(arrow_of(heads))
        if key == "prompt":
            lengths = av.ints(av.filled(head, UNKNOWN), f"{label}: column `{column}`")
            batch.prompt_lengths = lengths
        else:
            name = key[len("attr:") :]
            texts = [attr.as_text(v) for v in head.to_pylist()]
            problem = attr.text_problem(texts)
            if problem is not None:
                raise InputError(
                    f"{label}: column `{column}` (--attr {name}): {problem}",
                    f"name a column of short categories, or leave --attr {name} out.",
                )
            batch.attrs[name] = texts


def _positions_once(batch: RaggedBatch, label: str, found: Mapping[str, str]) -> None:
    """A sequence is the rows of one (step, sample id): a position met twice means the id is
    shared by several sequences (verl's ``uid`` is one per prompt group, shared by its n
    responses), whose tokens would interleave into one. Refused, never merged."""
    assert batch.position is not None
    same = np.diff(batch.position) == 0
    same &= np.diff(sequence_index(batch.offsets)) == 0
    if not same.any():
        return
    at = int(np.flatnonzero(same)[0])
    i = int(sequence_index(batch.offsets)[at])
    raise InputError(
        f"{label}: sample `{batch.sample_ids[i]}` of step {int(batch.steps[i])} has position "
        f"{int(batch.position[at])} twice (column `{found[S.ROLE_POSITION]}`): the sample id "
        f"`{found[S.ROLE_SAMPLE_ID]}` is shared by several sequences (verl's `uid` is one per "
        "prompt group), and their tokens would be merged into one",
        "name a column that is unique per response with --map sample_id=<column> (e.g. the "
        "row index of the response in its batch).",
    )
