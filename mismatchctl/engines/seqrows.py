"""The sequence rows of one source, joined to its tokens by ``seq``: what the per-sequence keys
(``length``, ``order``, ``batch_size``, ``attr:<name>``) and the KV positions (the prompt
length) come from.

A source's sequence rows are small (one row per response) and every token part of the source
needs them, so the few columns asked for are read once per process and kept (``load``, a small
LRU cache keyed by the paths and the columns).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.columns import numpy_of
from mismatchctl.engines import plan as K
from mismatchctl.errors import StoreError
from mismatchctl.store.integrity import read_error
from mismatchctl.store.parts import read_columns

Label = str | int | None
UNKNOWN = -1  # a prompt length the dump did not give
NO_WEIGHT_LAG = np.iinfo(np.int64).min  # a weight lag the dump did not give (a lag may be -1)


@dataclass
class SequenceRows:
    """One source's sequences, sorted by ``seq``: each one's model tokens, prompt length
    (``UNKNOWN`` where the dump has none), index in its step in dump order, and attributes
    (codes into their labels; a null is the last label, None)."""

    run: str
    seq: np.ndarray
    model_tokens: np.ndarray
    prompt_length: np.ndarray
    order: np.ndarray
    attributes: dict[str, tuple[np.ndarray, list[Label]]] = field(default_factory=dict)
    batch_size: np.ndarray | None = None  # UNKNOWN where neither the size nor the id is known
    weight_lag: np.ndarray | None = None  # NO_WEIGHT_LAG where the dump gives none

    def rows(self, seq: np.ndarray) -> np.ndarray:
        """The row of every ``seq`` id (a StoreError when one is not among the rows)."""
        seq = np.asarray(seq, dtype=np.int64)
        idx = np.searchsorted(self.seq, seq)
        inside = np.minimum(idx, max(len(self.seq) - 1, 0))
        bad = idx >= len(self.seq)
        if len(self.seq):
            bad |= self.seq[inside] != seq
        if bad.any():
            raise StoreError(
                f"run `{self.run}`: sequence {int(seq[bad][0])} has tokens but no sequence row",
                f"the store is damaged: `mismatchctl runs check {self.run}`, then re-ingest "
                "the run's dumps.",
            )
        return inside

    def batch_sizes(self) -> tuple[np.ndarray, list[Label]]:
        """Codes of the batch size per row and their labels (the sizes found, ascending, then
        None: unknown)."""
        sizes = self.batch_size
        if sizes is None:
            sizes = np.full(len(self.seq), UNKNOWN, dtype=np.int64)
        values, codes = np.unique(sizes, return_inverse=True)
        known = [int(v) for v in values if v != UNKNOWN]
        if len(known) < len(values):  # UNKNOWN sorts first: it becomes the last code
            codes = np.where(codes == 0, len(known), codes - 1)
        return codes.astype(np.int64), [*known, None]

    def attribute(self, name: str) -> tuple[np.ndarray, list[Label]]:
        """Codes of one attribute per row and their labels (a source without that attribute: every
        row null)."""
        if name in self.attributes:
            return self.attributes[name]
        return np.zeros(len(self.seq), dtype=np.int64), [None]


def columns_for(keys: list[str] | tuple[str, ...], names: list[str] | None = None) -> list[str]:
    """The columns of a sequence part (``names``: the part's columns; None: every column a key
    may ask for, which a part may lack) that the keys need."""
    out = [S.SEQ, S.STEP, S.MODEL_TOKENS]

    def has(column: str) -> bool:
        return names is None or column in names

    if K.KV_POSITION in keys and has(S.PROMPT_LENGTH):
        out.append(S.PROMPT_LENGTH)
    if K.BATCH_SIZE in keys:
        out += [c for c in (S.BATCH_ID, S.BATCH_SIZE) if has(c)]
    if K.WEIGHT_LAG in keys and has(S.WEIGHT_LAG):
        out.append(S.WEIGHT_LAG)
    for key in keys:
        if key.startswith(K.ATTR_PREFIX):
            column = S.attribute_column(key[len(K.ATTR_PREFIX) :])
            if has(column) and column not in out:
                out.append(column)
    return out


def load(run: str, paths: tuple[str, ...], keys: tuple[str, ...]) -> SequenceRows:
    """The sequence rows of one source (its sequence parts ``paths``) for these keys."""
    return _load(run, paths, tuple(sorted(set(keys))))


@functools.lru_cache(maxsize=16)
def _load(run: str, paths: tuple[str, ...], keys: tuple[str, ...]) -> SequenceRows:
    tables = []
    wanted = columns_for(keys)
    required, optional = wanted[:3], tuple(wanted[3:])  # the part's own; those it may lack
    for path in paths:
        try:  # one open of the file (its schema, then the columns it has): a run of 1,000 steps
            tables.append(read_columns(path, required, optional))  # has 1,000 of them
        except (OSError, pa.ArrowException) as exc:
            raise read_error(run, path, exc) from None
    table = pa.concat_tables(tables, promote_options="default") if tables else None
    return _rows(run, table, keys)


def _rows(run: str, table: pa.Table | None, keys: tuple[str, ...]) -> SequenceRows:
    if table is None or table.num_rows == 0:
        empty = np.zeros(0, dtype=np.int64)
        return SequenceRows(run, empty, empty, empty, empty)
    table = table.sort_by(S.SEQ)
    seq = numpy_of(table.column(S.SEQ))
    step = numpy_of(table.column(S.STEP))
    prompt = np.full(len(seq), UNKNOWN, dtype=np.int64)
    if S.PROMPT_LENGTH in table.column_names:
        col = table.column(S.PROMPT_LENGTH)
        prompt = numpy_of(col, fill=UNKNOWN).astype(np.int64)
    rows = SequenceRows(
        run, seq, numpy_of(table.column(S.MODEL_TOKENS)), prompt, step_order(step, seq)
    )
    for key in keys:
        if key.startswith(K.ATTR_PREFIX):
            column = S.attribute_column(key[len(K.ATTR_PREFIX) :])
            if column in table.column_names:
                rows.attributes[key[len(K.ATTR_PREFIX) :]] = _codes(table.column(column))
    if K.BATCH_SIZE in keys:
        rows.batch_size = batch_sizes(table, step)
    if K.WEIGHT_LAG in keys:
        rows.weight_lag = np.full(len(seq), NO_WEIGHT_LAG, dtype=np.int64)
        if S.WEIGHT_LAG in table.column_names:
            lags = numpy_of(table.column(S.WEIGHT_LAG), fill=NO_WEIGHT_LAG)
            rows.weight_lag = lags.astype(np.int64)
    return rows


def batch_sizes(table: pa.Table, step: np.ndarray) -> np.ndarray:
    """Each sequence's batch size: the one stored, else (a dump that gives the batch id only)
    the number of the source's sequences of its step with its batch id; ``UNKNOWN`` where
    neither is known."""
    n = table.num_rows
    size = np.full(n, UNKNOWN, dtype=np.int64)
    if S.BATCH_SIZE in table.column_names:
        size = numpy_of(table.column(S.BATCH_SIZE), fill=UNKNOWN).astype(np.int64)
    if S.BATCH_ID not in table.column_names:
        return size
    ids = numpy_of(table.column(S.BATCH_ID), fill=UNKNOWN).astype(np.int64)
    derive = (size == UNKNOWN) & (ids != UNKNOWN)
    if derive.any():
        pairs = np.stack([step[derive], ids[derive]], axis=1)
        _, inverse, counts = np.unique(pairs, axis=0, return_inverse=True, return_counts=True)
        size[derive] = counts[inverse.reshape(-1)]
    return size


def step_order(step: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """Each sequence's index among the sequences of its step (``seq`` ascending: dump order)."""
    order = np.lexsort((seq, step))
    sorted_step = step[order]
    first = np.flatnonzero(np.r_[True, sorted_step[1:] != sorted_step[:-1]])
    rank = np.arange(len(step)) - np.repeat(first, np.diff(np.r_[first, len(step)]))
    out = np.empty(len(step), dtype=np.int64)
    out[order] = rank
    return out


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[Label]]:
    arr = column.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(pa.string())
    encoded = arr.dictionary_encode()
    labels: list[Label] = encoded.dictionary.to_pylist()
    codes = numpy_of(encoded.indices, fill=len(labels)).astype(np.int64)
    return codes, [*labels, None]
