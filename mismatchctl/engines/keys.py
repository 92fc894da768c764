"""Per-token group keys of one slice of a part: codes (small ints) plus the label of each code.

``PartKeys(table, ...).codes(name)`` gives any key (dimension) at token granularity: one code per
row of ``table`` and the label of every code. Labels are values, so they mean the same in every
part: the run name, the step, the gpu, a tag's or an attribute's value (text; None when
unknown); the turn index (``0, 1, 2, "3+"``) and kind (``first``, ``later``); the index of a
probability bin; the lower edge of a position bin (``kv_position``, ``turn_position``,
``length``: ``1024`` is ``[1024, 2048)`` with the default edges) and the first sequence index of
an ``order`` block. For binned keys (bin, turn, turn kind, position bins, order) the labels are
every bin, whether or not the slice has tokens there, so their codes are the same in every part;
for the others (run, step, gpu, tags, attributes) the labels are the slice's own values.

Columns a key needs in ``table``: ``step``, ``seq``, ``turn`` and ``rollout_logprob`` always;
``gpu`` for ``gpu``; ``position`` for ``kv_position`` (``token_columns``). Keys read from the
sequence rows (``kv_position``'s prompt length, ``length``, ``order``, ``attr:<name>``) need
the source's ``SequenceRows`` (``engines.seqrows``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.columns import arrow_of, numpy_of
from mismatchctl.engines import plan as K
from mismatchctl.engines.seqrows import SequenceRows
from mismatchctl.stats import (
    TURN_INDEX_LABELS,
    TURN_KIND_LABELS,
    assign_bins,
    per_token,
    turn_index,
    turn_kind,
)
from mismatchctl.stats.entropy_bins import entropy_codes, entropy_labels
from mismatchctl.stats.kernel_choice import kernels_for
from mismatchctl.stats.positions import (
    assign_positions,
    order_blocks,
    order_labels,
    position_labels,
)
from mismatchctl.stats.turnruns import TurnRuns

Label = str | int | None


@dataclass
class KeyCodes:
    codes: np.ndarray  # int64 per row of the table
    labels: list[Label]


def token_columns(keys: list[str] | tuple[str, ...]) -> list[str]:
    """The token columns ``PartKeys`` needs for these keys, beyond step, seq, turn and the
    logprobs."""
    out = []
    if K.GPU in keys:
        out.append(S.GPU)
    if K.KV_POSITION in keys:
        out.append(S.POSITION)
    if K.ENTROPY in keys:
        out.append(S.TOKEN_ENTROPY)
    return out


class PartKeys:
    """Computes each key's codes for the rows of one table (a slice of a part, or one row per
    turn run of it), once, on demand. ``sequences``: the rows of the part's source, for the keys
    read from them (None: such a key is an error); ``rows``: the rows of ``table`` these keys
    are of (None: all of them; see :meth:`at`)."""

    def __init__(
        self,
        table: pa.Table,
        run: str,
        tags: dict[str, str],
        edges: np.ndarray,
        binning: K.Binning = K.DEFAULT_BINNING,
        sequences: SequenceRows | None = None,
        rows: np.ndarray | None = None,
    ) -> None:
        self.table, self.run, self.tags, self.edges = table, run, tags, edges
        self.binning, self.sequences = binning, sequences
        self.taken = rows
        self.n = table.num_rows if rows is None else len(rows)
        self._cache: dict[str, KeyCodes] = {}
        self._rows: np.ndarray | None = None
        self._cube_k3: np.ndarray | None = None
        self._log_ratio: tuple[np.ndarray, np.ndarray] | None = None
        self._probability: dict[str, np.ndarray] = {}
        self._starts: np.ndarray | None = None
        self.runs: TurnRuns | None = None  # the slice's turn runs, once the engine made them
        self.by_run: RunKeys | None = None  # the keys of their first rows (the engine's)

    def get(self, key: str) -> KeyCodes:
        if key not in self._cache:
            self._cache[key] = self._compute(key)
        return self._cache[key]

    codes = get  # the name the explain cube uses: any dimension, at token granularity

    def at(self, rows: np.ndarray) -> PartKeys:
        """The keys of the rows ``rows`` of this table only (e.g. each sequence's first row: the
        keys constant along a sequence, computed once per sequence instead of per token). The
        columns are taken from numpy views of the table's (no Arrow ``take``: its compute
        module costs a process 0.1 s to load)."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.taken is not None:
            rows = self.taken[rows]
        return PartKeys(
            self.table, self.run, self.tags, self.edges, self.binning, self.sequences, rows
        )

    def _compute(self, key: str) -> KeyCodes:
        zeros = np.zeros(self.n, dtype=np.int64)
        if key == K.RUN:
            return KeyCodes(zeros, [self.run])
        if key.startswith(K.TAG_PREFIX):
            return KeyCodes(zeros, [self.tags.get(key[len(K.TAG_PREFIX) :])])
        if key == K.STEP:
            return _value_codes(self.column(S.STEP))
        if key == K.GPU:
            return self._gpu()
        if key == K.TURN_KIND:
            return KeyCodes(turn_kind(self.column(S.TURN)), list(TURN_KIND_LABELS))
        if key == K.TURN:
            labels: list[Label] = [int(x) if x.isdigit() else x for x in TURN_INDEX_LABELS]
            return KeyCodes(turn_index(self.column(S.TURN)), labels)
        if key in (K.BIN, K.TRAINER_PROB):  # the same bins of either side's probability
            p = self.probability(S.ROLLOUT if key == K.BIN else S.TRAINER)
            return KeyCodes(
                assign_bins(p, self.edges).astype(np.int64), list(range(len(self.edges) - 1))
            )
        if key == K.ENTROPY:
            return KeyCodes(entropy_codes(self.column(S.TOKEN_ENTROPY)), list(entropy_labels()))
        if key == K.BATCH_SIZE:
            codes, values = self.sequence_rows().batch_sizes()
            return KeyCodes(codes[self.rows()], list(values))
        if key in (K.KV_POSITION, K.TURN_POSITION, K.LENGTH):
            return self._position(key)
        if key == K.DUMP_ORDER:
            order = self.sequence_rows().order[self.rows()]
            block = self.binning.order_block
            return KeyCodes(order_blocks(order, block), list(order_labels(block)))
        if key.startswith(K.ATTR_PREFIX):
            codes, values = self.sequence_rows().attribute(key[len(K.ATTR_PREFIX) :])
            return KeyCodes(codes[self.rows()], list(values))
        raise ValueError(key)

    def _position(self, key: str) -> KeyCodes:
        edges = self.binning.positions
        if key == K.KV_POSITION:
            values = self.column(S.POSITION).astype(np.int64) + self.prompt_lengths()
        elif key == K.TURN_POSITION:
            values = turn_positions(self.column(S.SEQ), self.column(S.TURN))
        else:
            values = self.sequence_rows().model_tokens[self.rows()]
        return KeyCodes(assign_positions(values, edges), list(position_labels(edges)))

    def log_ratio(self) -> tuple[np.ndarray, np.ndarray]:
        """Each row's ``r = lt - lr`` and K3 ``expm1(r) - r`` in numpy (as the extras' numpy sums
        compute them), once per slice for every extra that sums them."""
        if self._log_ratio is None:
            r = self.column(S.TRAINER) - self.column(S.ROLLOUT)
            with np.errstate(invalid="ignore"):
                self._log_ratio = (r, per_token.k3(r))
        return self._log_ratio

    def probability(self, column: str) -> np.ndarray:
        """``exp`` of a logprob column, once per slice: the bin key's and the cube's token codes
        (``explain._Coder``) both bin the rollout's. The turn runs' cells' ``exp``
        (``kernels.exps``, ``stats/exp_poly.py``), so that a token on a bin edge lands in the
        same bin in every view."""
        if column not in self._probability:
            values = np.ascontiguousarray(self.column(column), dtype=np.float64)
            self._probability[column] = kernels_for(self.n).exps(values)
        return self._probability[column]

    def cube_k3(self) -> np.ndarray:
        """Each row's K3 as the K3 cubes' compiled loop computes it (``cube_kernels.token_k3``),
        once per slice for every cube the extras add it to."""
        if self._cube_k3 is None:
            from mismatchctl.stats.cube import kernels as cube_kernels

            lr, lt = self.column(S.ROLLOUT), self.column(S.TRAINER)
            self._cube_k3 = np.empty(self.n, dtype=np.float64)
            cube_kernels.token_k3(
                np.ascontiguousarray(lr, np.float64), np.ascontiguousarray(lt, np.float64),
                self._cube_k3,
            )  # fmt: skip
        return self._cube_k3

    def column(self, column: str) -> np.ndarray:
        """A token column of the rows (the entropy's nulls, and a part without it, as NaN)."""
        if column == S.TOKEN_ENTROPY:
            values = token_entropy(self.table)
            return values if self.taken is None else values[self.taken]
        values = numpy_of(self.table.column(column))
        return values if self.taken is None else values[self.taken]

    def sequence_rows(self) -> SequenceRows:
        if self.sequences is None:
            raise ValueError("a key read from the sequence rows needs the source's SequenceRows")
        return self.sequences

    def sequence_starts(self) -> np.ndarray:
        """The first row of each run of equal ``seq`` (a slice's sequences: each contiguous),
        once per slice for every extra that sums per sequence."""
        if self._starts is None:
            seq = self.column(S.SEQ)
            self._starts = (
                np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
                if len(seq)
                else np.zeros(0, np.int64)
            )
        return self._starts

    def rows(self) -> np.ndarray:
        """Each row's row in the sequence rows (by ``seq``)."""
        if self._rows is None:  # looked up once per run of equal ids, then repeated
            seq = self.column(S.SEQ)
            starts = self.sequence_starts()
            found = self.sequence_rows().rows(seq[starts])
            self._rows = np.repeat(found, np.diff(np.r_[starts, len(seq)]))
        return self._rows

    def prompt_lengths(self) -> np.ndarray:
        """Each row's prompt length (0 where the dump gave none: positions are then the
        response's own)."""
        if self.sequences is None:
            return np.zeros(self.n, dtype=np.int64)
        return np.maximum(self.sequences.prompt_length[self.rows()], 0)

    def _gpu(self) -> KeyCodes:
        """The gpu codes from the dictionary indices in numpy (no Arrow ``take`` or dictionary
        unification: pyarrow's compute module costs a process 0.1 s to load). Labels in the
        order of the chunks' dictionaries, new values appended (Arrow's unified dictionary);
        ``None`` last, the code of a missing gpu."""
        col = self.table.column(S.GPU)
        chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
        if not all(pa.types.is_dictionary(chunk.type) for chunk in chunks):
            return self._gpu_encoded(col)  # not read as a dictionary (the store reads it as one)
        where: dict[Label, int] = {}
        names = [v for chunk in chunks for v in chunk.dictionary.to_pylist()]
        label_of = [where.setdefault(v, len(where)) for v in names]
        lut = np.array([*label_of, len(where)], np.int64)  # the code of None last
        index: list[np.ndarray] = []  # each chunk's indices into `lut`: its dictionary's place
        at = 0
        for chunk in chunks:
            rows = numpy_of(chunk.indices, fill=len(lut) - 1 - at)  # a null: None's code
            index.append(rows + at if at else rows)
            at += len(chunk.dictionary)
        rows = index[0] if len(index) == 1 else np.concatenate(index or [np.zeros(0, np.int64)])
        codes = lut[rows if self.taken is None else rows[self.taken]]
        return KeyCodes(codes, [*where, None])

    def _gpu_encoded(self, col: pa.ChunkedArray | pa.Array) -> KeyCodes:
        """The gpu codes of a column not (only) dictionary-encoded, by Arrow's encoding."""
        if self.taken is not None:
            col = col.take(arrow_of(self.taken))
        if not pa.types.is_dictionary(col.type):
            col = col.dictionary_encode()
        col = col.unify_dictionaries() if isinstance(col, pa.ChunkedArray) else col
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        labels: list[Label] = arr.dictionary.to_pylist()
        codes = numpy_of(arr.indices, fill=len(labels)).astype(np.int64)
        return KeyCodes(codes, [*labels, None])


def token_entropy(table: pa.Table) -> np.ndarray:
    """The rows' per-token entropy, NaN where unknown (a null, or a part written before token
    rows had the column)."""
    if S.TOKEN_ENTROPY not in table.column_names:
        return np.full(table.num_rows, np.nan)
    return numpy_of(table.column(S.TOKEN_ENTROPY), fill=np.nan).astype(np.float64, copy=False)


def _value_codes(values: np.ndarray) -> KeyCodes:
    """Codes of the distinct values (ascending) of an integer column: ``np.unique``'s, without
    its sort when the slice holds one value (a part is usually of one step)."""
    if len(values) and values.min() == values.max():
        return KeyCodes(np.zeros(len(values), dtype=np.int64), [int(values[0])])
    found, codes = np.unique(values, return_inverse=True)
    return KeyCodes(codes.astype(np.int64), [int(v) for v in found])


def turn_positions(seq: np.ndarray, turn: np.ndarray) -> np.ndarray:
    """Each token's index among the model tokens of its turn run (the contiguous tokens of one
    sequence in one turn): 0 at the first token after a tool response."""
    n = len(seq)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    new = np.ones(n, dtype=bool)
    new[1:] = (seq[1:] != seq[:-1]) | (turn[1:] != turn[:-1])
    starts = np.flatnonzero(new)
    return np.arange(n, dtype=np.int64) - np.repeat(starts, np.diff(np.r_[starts, n]))


def key_labels(key: str, edges: np.ndarray, binning: K.Binning = K.DEFAULT_BINNING) -> list[Label]:
    """Every label of a binned key (its codes are the same in every part); a ValueError for a key
    whose labels are values found in the data (run, step, gpu, tags, attributes)."""
    if key == K.TURN_KIND:
        return list(TURN_KIND_LABELS)
    if key == K.TURN:
        return [int(x) if x.isdigit() else x for x in TURN_INDEX_LABELS]
    if key in (K.BIN, K.TRAINER_PROB):
        return list(range(len(edges) - 1))
    if key == K.ENTROPY:
        return list(entropy_labels())
    if key in K.POSITION_KEYS:
        return list(position_labels(binning.positions))
    if key == K.DUMP_ORDER:
        return list(order_labels(binning.order_block))
    raise ValueError(f"`{key}` has no fixed labels: they are the values found in the data")


@dataclass
class RunKeys:
    """The keys of a slice's turn runs (one row per run: its first token) and each run's
    tokens: every key but the token keys is constant along a turn run."""

    keys: PartKeys
    lengths: np.ndarray


def token_group_codes(
    keys: PartKeys, split: tuple[str, ...]
) -> tuple[np.ndarray, int, list[list[Label]]]:
    """``group_codes`` of every token of the slice, the keys constant along a turn run coded
    once per run (from ``keys.by_run``, when the engine kept it) and repeated."""
    runs = keys.by_run
    along = tuple(k for k in split if k not in K.TOKEN_KEYS)
    if runs is None or split != along + K.token_keys(split):
        return group_codes(keys, split)
    code, size, labels = group_codes(runs.keys, along)
    code = np.repeat(code, runs.lengths)
    for key in K.token_keys(split):
        kc = keys.get(key)
        code = code * len(kc.labels) + kc.codes
        size *= len(kc.labels)
        labels.append(kc.labels)
    return code, size, labels


def group_codes(
    keys: PartKeys, split: tuple[str, ...]
) -> tuple[np.ndarray, int, list[list[Label]]]:
    """Mixed-radix code of the split's keys per token, the number of codes, and each key's labels."""
    code = np.zeros(keys.n, dtype=np.int64)
    size = 1
    labels = []
    for key in split:
        kc = keys.get(key)
        code = code * len(kc.labels) + kc.codes
        size *= len(kc.labels)
        labels.append(kc.labels)
    return code, size, labels


def decode(code: int, labels: list[list[Label]]) -> tuple[Label, ...]:
    out: list[Label] = []
    for values in reversed(labels):
        code, digit = divmod(code, len(values))
        out.append(values[digit])
    return tuple(reversed(out))
