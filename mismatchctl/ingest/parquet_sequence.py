"""Parquet sequence layout: one row per response, list columns (ragged or right-padded).

verl's trainer batch is the model: ``responses`` right-padded with 0, ``response_mask`` 1 on
LLM-generated tokens and 0 on tool tokens and padding, ``rollout_log_probs`` and ``old_log_probs``
0.0 at masked positions.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mismatchctl import schema as S
from mismatchctl.columns import list_lengths, numpy_of, valid_of
from mismatchctl.errors import InputError
from mismatchctl.ingest import arrow_values as av
from mismatchctl.ingest import attributes as attr
from mismatchctl.ingest import parquet_extra as extra
from mismatchctl.ingest import source as ingest_source
from mismatchctl.ingest.batch import RaggedBatch, RouteColumn, offsets_from_lengths
from mismatchctl.ingest.column_roles import SEQUENCE_NAMES, require, resolve, unique_names
from mismatchctl.ingest.routes import START_LEN
from mismatchctl.ingest.source import Source, step_from_name, step_in_range, tags_from_metadata
from mismatchctl.options import FORMAT_SEQUENCE

PER_TOKEN = (S.ROLE_ROLLOUT, S.ROLE_TRAINER, S.ROLE_MASK, S.ROLE_TOKENS)
# verl's attention_mask covers prompt + response (left-padded prompt, right-padded response):
# its last entries, as many as the logprobs, mark the response without its padding, but cover
# tool responses too (verl's own debug metrics fall back to it the same way)
ATTENTION_MASK = "attention_mask"


def open_sequence(
    path: Path,
    mapping: Mapping[str, str],
    label: str,
    attrs: Sequence[str] = (),
    pf: pq.ParquetFile | None = None,
) -> Source:
    """``label``: the file as messages name it; ``attrs``: columns to keep as attributes (beside
    those found automatically, ``ingest.attributes``); ``pf``: the file already opened (an
    in-memory buffer: ``path`` then only names it, as the default sample ids do)."""
    on_disk = pf is None  # a file a route read can stream again from its path
    pf = pq.ParquetFile(path) if pf is None else pf
    names = pf.schema_arrow.names
    unique_names(names, label)
    found = resolve(names, SEQUENCE_NAMES, mapping, label)
    require(found, (S.ROLE_ROLLOUT, S.ROLE_TRAINER), names, label)
    meta = pf.schema_arrow.metadata or {}
    source = Source(path, FORMAT_SEQUENCE, iter(()), found, tags_from_metadata(meta))
    _drop_list_scalars(pf.schema_arrow, found, source.notes)
    step = _default_step(path, label, meta, found, source.notes)
    if S.ROLE_MASK not in found and ATTENTION_MASK in names:
        found[S.ROLE_MASK] = ATTENTION_MASK
    if found.get(S.ROLE_MASK) == ATTENTION_MASK:
        source.notes.append(
            f"mask: the response part of `{ATTENTION_MASK}` (its last entries, as many as the "
            "logprobs): padding excluded, prompt lengths kept; it covers tool responses too, "
            "so its positions were checked for tool-response fills (a response mask is better)"
        )
    elif S.ROLE_MASK not in found:
        source.notes.append("no mask column: every listed token counted as a model token")
    attention = ATTENTION_MASK in names and av.is_list_type(
        pf.schema_arrow.field(ATTENTION_MASK).type
    )
    used = {*found.values(), ATTENTION_MASK, START_LEN}
    extras = extra.find_extras(pf, used, attrs, label, source.notes)
    source.attributes = list(extras.attributes)
    _prompt_notes(pf, extras, attention, source.notes)
    source.batches = _batches(pf, path, label, found, step, attention, extras, on_disk)
    return source


def _prompt_notes(
    pf: pq.ParquetFile, extras: extra.Extras, attention: bool, notes: list[str]
) -> None:
    """Where the prompt lengths come from (``kv_position`` counts from them), or that there are
    none."""
    if extras.prompt_length is not None:
        notes.append(f"prompt lengths: column `{extras.prompt_length}`")
    elif attention:
        notes.append(f"prompt lengths: the prompt part of `{ATTENTION_MASK}`")
    elif extras.prompt_list is not None:
        lengths = pc.list_value_length(pf.read(columns=[extras.prompt_list]).column(0))
        same = pc.min_max(lengths)
        padded = ""
        if pf.metadata.num_rows > 1 and same["min"].as_py() == same["max"].as_py():
            padded = (
                f" (every prompt is {same['min'].as_py()} long: if they are padded, the "
                "lengths count the padding)"
            )
        notes.append(f"prompt lengths: the length of `{extras.prompt_list}`{padded}")
    else:
        notes.append("no prompt lengths: kv_position counts from the first position of the arrays")


ROUTE_ROLES = (S.ROLE_ROLLOUT_ROUTES, S.ROLE_TRAINER_ROUTES)
ROUTES_READ_BUFFER = 8 << 20  # bytes of a column chunk read at once when the file has routes
PER_SEQUENCE = (S.ROLE_STEP, S.ROLE_SAMPLE_ID, S.ROLE_GPU, S.ROLE_REWARD, S.ROLE_WEIGHT_VERSION)


def _drop_list_scalars(schema: pa.Schema, found: dict[str, str], notes: list[str]) -> None:
    """Optional per-response roles found as list columns (token-level scores) are not used."""
    for role in PER_SEQUENCE:
        if role in found and av.is_list_type(schema.field(found[role]).type):
            notes.append(
                f"column `{found.pop(role)}` is a list, not one {role} per response: unused"
            )


def _default_step(
    path: Path, label: str, meta: dict, found: Mapping[str, str], notes: list[str]
) -> int:
    """The step for rows without a step column: metadata, then the file name, else 0 (noted)."""
    if S.ROLE_STEP in found:
        return 0
    text = meta.get(b"step", b"").decode(errors="replace").strip()
    if text.isascii() and text.isdigit():
        hint = "write the step's real number in the metadata, or add a step column."
        return step_in_range(text, f"{label}: metadata `step`", hint)
    from_name = step_from_name(path, label)
    if from_name is not None:
        return from_name
    notes.append("no step column, metadata or step in the file name: rows counted as step 0")
    return 0


def _batches(
    pf: pq.ParquetFile,
    path: Path,
    label: str,
    found: Mapping[str, str],
    step: int,
    attention: bool,
    extras: extra.Extras,
    on_disk: bool = True,
) -> Iterator[RaggedBatch]:
    """``attention``: the file has an attention_mask list column, read for the prompt lengths
    (and as the mask when it is the mask's column); ``on_disk``: ``pf`` was opened from
    ``path`` (a file with routes is then streamed from it again; an in-memory buffer is read
    as it is)."""
    rows_done = 0
    prompts = [c for c in (extras.prompt_length, extras.prompt_list) if c is not None]
    starts = [START_LEN] if START_LEN in pf.schema_arrow.names else []
    columns = [*found.values(), *([ATTENTION_MASK] if attention else []), *prompts, *starts]
    columns = list(dict.fromkeys(columns))
    avg = max(1, pf.metadata.num_rows and _avg_len(pf, found[S.ROLE_ROLLOUT], label))
    rows_per_batch = max(1, min(65536, ingest_source.BATCH_TOKENS // avg))
    routes = any(role in found for role in ROUTE_ROLES)
    if routes:  # routes: hundreds of ids a token
        rows_per_batch = max(1, rows_per_batch // ingest_source.ROUTES_BATCH_DIVISOR)
    if on_disk and (routes or _buffered_bytes(pf, columns) > PRE_BUFFER_BYTES):
        # the column chunks streamed through a buffer, not read (pre-buffered) whole: a row
        # group's routes are hundreds of MB, and a reader pre-buffers the chunks of every row
        # group it is asked for before the first batch (the whole file's columns)
        pf = pq.ParquetFile(path, buffer_size=ROUTES_READ_BUFFER, pre_buffer=False)
    for record in pf.iter_batches(batch_size=rows_per_batch, columns=columns):
        batch = _to_batch(record, path, label, found, step, rows_done)
        prompt = batch.prompt_lengths  # the attention mask's prompt parts, when it has them
        batch.prompt_lengths = extra.prompt_lengths(record, extras, prompt, label)
        if batch.prompt_outside is None and batch.prompt_lengths is not None:
            # the prompt the arrays leave out (a prompt_length column or a prompt-ids list):
            # counted as prompt tokens, as kv_position counts from it
            batch.prompt_outside = np.maximum(batch.prompt_lengths, 0)
        ids = extra.prompt_ids(record, extras, batch.prompt_outside, label)
        if ids is not None:  # the prompt's token ids, kept with the tool responses' (masked/)
            batch.prompt_ids, batch.prompt_id_offsets = ids
        batch.attrs = attr.per_batch(extras.attributes, rows_done, rows_done + record.num_rows)
        _routes(batch, record, found, attention)
        yield batch
        rows_done += record.num_rows


PRE_BUFFER_BYTES = 64 << 20
"""A file whose columns read hold more compressed bytes than this is streamed through a buffer
(``ROUTES_READ_BUFFER``) instead of pre-buffered: pyarrow pre-buffers the column chunks of every
row group of the read before its first batch, so a 40M-position file held 290 MB more than the
same rows in 20 files (docs/benchmarks.md "Report memory"); smaller files keep the faster
pre-buffered read."""


def _buffered_bytes(pf: pq.ParquetFile, columns: list[str]) -> int:
    """The compressed bytes of ``columns`` over every row group (the footer's sizes)."""
    meta, names = pf.metadata, set(columns)
    total = 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            if chunk.path_in_schema.split(".", 1)[0] in names:
                total += chunk.total_compressed_size
    return total


def _routes(
    batch: RaggedBatch, record: pa.RecordBatch, found: Mapping[str, str], attention: bool
) -> None:
    """Each side's routes column as read (decoded in canonicalisation), with what places its
    rows: SGLang's start lengths, and the prompt part's width of a whole-sequence list (the
    attention mask's length minus the response, else the known prompt length)."""
    starts = None
    if START_LEN in record.schema.names:
        starts = numpy_of(record.column(START_LEN).cast(pa.int64()), fill=0)
    lengths = batch.lengths()
    if attention:
        full = list_lengths(record.column(ATTENTION_MASK), fill=0)  # a null mask: no prompt
        widths = np.maximum(full - lengths, 0)
    elif batch.prompt_lengths is not None:
        widths = np.where(batch.prompt_lengths >= 0, batch.prompt_lengths, 0)
    else:
        widths = None
    for role in ROUTE_ROLES:
        if role in found:
            batch.routes[role] = RouteColumn(
                record.column(found[role]), found[role], starts, widths
            )


def _avg_len(pf: pq.ParquetFile, column: str, label: str) -> int:
    """Average list length from the first row group (to size batches near 1M tokens)."""
    if pf.metadata.num_row_groups == 0:
        return 1
    first = pf.read_row_group(0, columns=[column]).column(0)
    if not av.is_list_type(first.type):
        raise _not_a_list(label, column, first.type)
    _, lengths = av.list_values(first, f"{label}: column `{column}`")
    return int(lengths.mean()) if len(lengths) else 1


def _to_batch(
    record: pa.RecordBatch,
    path: Path,
    label: str,
    found: Mapping[str, str],
    step: int,
    row0: int,
) -> RaggedBatch:
    n = record.num_rows

    def col(role: str) -> pa.Array:
        return record.column(found[role])

    def what(role: str) -> str:
        return f"{label}: column `{found[role]}`"

    flat: dict[str, tuple[pa.Array, np.ndarray]] = {}
    for role in PER_TOKEN:
        if role in found:
            if not av.is_list_type(col(role).type):
                raise _not_a_list(label, found[role], col(role).type)
            flat[role] = av.list_values(col(role), what(role))
    values, lengths = flat[S.ROLE_ROLLOUT]
    batch = RaggedBatch(
        steps=av.ints(col(S.ROLE_STEP), what(S.ROLE_STEP))
        if S.ROLE_STEP in found
        else np.full(n, step, dtype=np.int64),
        sample_ids=_sample_ids(col(S.ROLE_SAMPLE_ID), path, row0)
        if S.ROLE_SAMPLE_ID in found
        else [f"{path.stem}#{row0 + i}" for i in range(n)],
        offsets=offsets_from_lengths(lengths),
        rollout=av.floats(values, what(S.ROLE_ROLLOUT)),
        trainer=av.floats(flat[S.ROLE_TRAINER][0], what(S.ROLE_TRAINER)),
        locations=[f"row {row0 + i}" for i in range(n)],
    )
    batch.role_lengths[S.ROLE_TRAINER] = flat[S.ROLE_TRAINER][1]
    if S.ROLE_MASK in flat:
        batch.mask = av.mask01(flat[S.ROLE_MASK][0], what(S.ROLE_MASK))
        batch.role_lengths[S.ROLE_MASK] = flat[S.ROLE_MASK][1]
        if found[S.ROLE_MASK] == ATTENTION_MASK:
            _response_part(batch, lengths)
    if found.get(S.ROLE_MASK) != ATTENTION_MASK and ATTENTION_MASK in record.schema.names:
        attention, full = av.list_values(record.column(ATTENTION_MASK), _attention(label))
        ones = av.mask01(attention, _attention(label))
        _, take, batch.prompt_outside = _response_and_prompt(ones, full, lengths)
        batch.prompt_lengths = _known(batch.prompt_outside, full, take)
    if S.ROLE_TOKENS in flat:
        batch.token_ids = av.ints(flat[S.ROLE_TOKENS][0], what(S.ROLE_TOKENS))
        batch.role_lengths[S.ROLE_TOKENS] = flat[S.ROLE_TOKENS][1]
    if S.ROLE_ENTROPY in found:
        _entropy(batch, col(S.ROLE_ENTROPY), what(S.ROLE_ENTROPY))
    _per_sequence_extras(batch, col, what, found)
    return batch


def _attention(label: str) -> str:
    return f"{label}: column `{ATTENTION_MASK}`"


def _response_and_prompt(
    mask: np.ndarray, full: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of attention masks (flat, rows ``full`` long) over prompt + response: where the response
    part of each row is in ``mask`` (its last entries, as many as the row's ``lengths`` of
    logprobs; a shorter row is taken whole, and its length mismatch reported), how long each
    part is, and each prompt's length (the ones before it: the prompt is left-padded)."""
    take = np.where(full >= lengths, lengths, full)
    row_ends = offsets_from_lengths(full)[1:]
    starts = row_ends - take
    index = np.repeat(starts - offsets_from_lengths(take)[:-1], take) + np.arange(take.sum())
    ones = np.concatenate([[0], np.cumsum(mask, dtype=np.int64)])
    return index, take, ones[starts] - ones[row_ends - full]


def _response_part(batch: RaggedBatch, lengths: np.ndarray) -> None:
    """The mask becomes the response part of each row's attention mask; the prompt part gives
    the prompt's length."""
    assert batch.mask is not None
    full = batch.role_lengths[S.ROLE_MASK]
    index, take, prompts = _response_and_prompt(batch.mask, full, lengths)
    batch.prompt_outside = prompts
    batch.prompt_lengths = _known(prompts, full, take)
    batch.mask = batch.mask[index]
    batch.role_lengths[S.ROLE_MASK] = take
    batch.partial_mask = ATTENTION_MASK


def _known(prompts: np.ndarray, full: np.ndarray, take: np.ndarray) -> np.ndarray:
    """Prompt lengths from an attention mask: unknown for a row with no prompt part (a mask as
    long as the response says nothing of the prompt)."""
    return np.where(full > take, prompts, extra.UNKNOWN)


def _entropy(batch: RaggedBatch, column: pa.Array, what: str) -> None:
    """A list column is per token (aligned with the logprobs, like the mask); a scalar column is
    one mean per response, taken as is (a null there is an unknown, a NaN is bad data)."""
    if av.is_list_type(column.type):
        values, lengths = av.list_values(column, what)
        batch.entropy = av.floats(values, what)
        batch.role_lengths[S.ROLE_ENTROPY] = lengths
    else:
        batch.entropies = av.optional_floats(column, what)
        batch.entropies_given = valid_of(column)


def _per_sequence_extras(batch: RaggedBatch, col, what, found: Mapping[str, str]) -> None:
    if S.ROLE_GPU in found:
        batch.gpus = [g or None for g in av.strings(col(S.ROLE_GPU))]
    if S.ROLE_REWARD in found:
        batch.rewards = av.optional_floats(col(S.ROLE_REWARD), what(S.ROLE_REWARD))
    if S.ROLE_WEIGHT_VERSION in found:
        batch.weight_versions = av.optional_floats(
            col(S.ROLE_WEIGHT_VERSION), what(S.ROLE_WEIGHT_VERSION)
        )


def _sample_ids(values: pa.Array, path: Path, row0: int) -> list[str]:
    """The column's ids; a row whose id is null is named ``<file>#<row>``, as in a dump without
    ids (an empty id would merge unrelated samples in every per-sample listing)."""
    ids = av.strings(values)
    if values.null_count:
        for i in np.flatnonzero(~valid_of(values)).tolist():
            ids[i] = f"{path.stem}#{row0 + i}"
    return ids


def _not_a_list(label: str, column: str, t: pa.DataType) -> Exception:
    return InputError(
        f"{label}: column `{column}` is {t}, expected a list column (one list per response)",
        "for one row per token use --format parquet-token.",
    )
