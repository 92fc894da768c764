"""What the engine is asked to compute: the split keys and the plan of passes that computes them,
the parts to read (``PartTask``), what is kept inside a part (``RowFilter``) and the whole
``Selection`` a command reads.

A *split* is a tuple of keys such as ``("run", "turn_kind")``. Keys that are constant within a
sequence (run, gpu, step, tags, attributes, length, order) can be merged across groups exactly;
keys that cut sequences into segments (turn kind, turn index) cannot, because segments are not
sequences; keys that vary inside a turn run (probability bin, KV position, position in the turn:
*token keys*) cut even turns, and their groups carry token metrics only. So the engine makes one
pass per distinct set of segment keys (and, for token keys, one per set of token keys), at the
finest sequence-level keys any split of that set needs, and every split is then a merge of that
pass's groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.columns import arrow_of, equal_to, numpy_of, valid_of
from mismatchctl.errors import UsageError
from mismatchctl.options import KEYS_HELP, ROUTING_LAYER
from mismatchctl.stats.positions import LOG2_EDGES, ORDER_BLOCK
from mismatchctl.stats.tails import DEFAULT_TAILS, Tails
from mismatchctl.store import RunInfo, Store

RUN, GPU, STEP, TURN_KIND, TURN, BIN = "run", "gpu", "step", "turn_kind", "turn", "bin"
KV_POSITION, TURN_POSITION, LENGTH, DUMP_ORDER = "kv_position", "turn_position", "length", "order"
ENTROPY, TRAINER_PROB, BATCH_SIZE = "entropy", "trainer_prob", "batch_size"
TAG_PREFIX = "tag:"
ATTR_PREFIX = "attr:"
# vary inside a turn run: the inference probability's bin, the KV position and the position in the
# turn, the token's entropy and the trainer probability's bin
TOKEN_KEYS = (BIN, KV_POSITION, TURN_POSITION, ENTROPY, TRAINER_PROB)
SEGMENT_KEYS = (TURN_KIND, TURN, *TOKEN_KEYS)  # cut sequences
# not a key to split by: what an extra asks for to have each sequence's weight lag among the
# sequence rows it is given (diagnose's staleness sums)
WEIGHT_LAG = "weight_lag"
# keys read from the sequence rows of a token's source (beside attr:<name>)
SEQUENCE_ROW_KEYS = (KV_POSITION, LENGTH, DUMP_ORDER, BATCH_SIZE, WEIGHT_LAG)
POSITION_KEYS = (KV_POSITION, TURN_POSITION, LENGTH)  # binned by the position edges
ORDER = (RUN, GPU, STEP, LENGTH, DUMP_ORDER, BATCH_SIZE, TURN_KIND, TURN, *TOKEN_KEYS)

Split = tuple[str, ...]


def is_key(name: str) -> bool:
    return name in ORDER or any(
        name.startswith(prefix) and len(name) > len(prefix) for prefix in (TAG_PREFIX, ATTR_PREFIX)
    )


def needs_sequence_rows(key: str) -> bool:
    """Whether a key's codes come from the sequence rows of the token's source."""
    return key in SEQUENCE_ROW_KEYS or key.startswith(ATTR_PREFIX)


_RANK = {
    RUN: 0,
    GPU: 1,
    STEP: 2,
    TAG_PREFIX: 3,
    ATTR_PREFIX: 4,
    LENGTH: 5,
    DUMP_ORDER: 6,
    BATCH_SIZE: 7,
    TURN_KIND: 8,
    TURN: 9,
    BIN: 10,
    KV_POSITION: 11,
    TURN_POSITION: 12,
    ENTROPY: 13,
    TRAINER_PROB: 14,
}


def canonical(keys: list[str] | tuple[str, ...]) -> Split:
    """Keys in a fixed order (run, gpu, step, tags, attributes, length, order, batch_size,
    turn_kind, turn, bin, kv_position, turn_position, entropy, trainer_prob), without
    duplicates."""

    def rank(k: str) -> tuple[int, str]:
        for prefix in (TAG_PREFIX, ATTR_PREFIX):
            if k.startswith(prefix):
                return (_RANK[prefix], k)
        return (_RANK[k], k)

    return tuple(sorted(dict.fromkeys(keys), key=rank))


def parse_by(values: list[str], option: str = "--by") -> list[Split]:
    """Each ``--by`` adds one split; commas combine keys (``--by step,turn_kind``)."""
    splits = []
    for value in values:
        keys = [k.strip() for k in value.split(",") if k.strip()]
        bad = [k for k in keys if not is_key(k)]
        if ROUTING_LAYER in bad and len(keys) > 1:
            raise UsageError(
                f"{option} `{value}`: `{ROUTING_LAYER}` (the MoE routing per layer) is a table of "
                "its own, not combined with other keys",
                f"give it alone: {option} {ROUTING_LAYER}"
                + "".join(f" {option} {k}" for k in keys if k != ROUTING_LAYER)
                + ".",
            )
        if not keys or bad:
            raise UsageError(
                f"{option} `{value}`: unknown split key `{(bad or [value])[0]}`",
                f"use {KEYS_HELP}, combined with commas (e.g. {option} step,turn_kind).",
            )
        splits.append(canonical(keys))
    return splits


def default_splits(by_gpu: bool) -> list[Split]:
    """The whole selection and, per run: run, run x turn kind, run x turn, run x bin, run x step."""
    splits: list[Split] = [(), (RUN,), (RUN, TURN_KIND), (RUN, TURN), (RUN, BIN), (RUN, STEP)]
    if by_gpu:
        splits += [(GPU,), (GPU, STEP)]
    return splits


def segment_keys(split: Split) -> tuple[str, ...]:
    return tuple(k for k in split if k in SEGMENT_KEYS)


def token_keys(split: Split) -> tuple[str, ...]:
    return tuple(k for k in split if k in TOKEN_KEYS)


@dataclass(frozen=True)
class Pass:
    """One engine pass: group tokens by ``keys`` (sequence-level keys + ``segment`` keys, the
    token keys last)."""

    segment: tuple[str, ...]
    keys: Split

    @property
    def token(self) -> tuple[str, ...]:
        """The pass's token keys (``TOKEN_KEYS``), in that order."""
        return token_keys(self.segment)

    @property
    def uses(self) -> tuple[bool, ...]:
        """Which of the ``TOKEN_KEYS`` the pass groups by, in their order."""
        return tuple(k in self.segment for k in TOKEN_KEYS)

    @property
    def with_hist(self) -> bool:
        return BIN in self.segment


def plan(splits: list[Split]) -> list[Pass]:
    """One pass per set of segment keys, at the union of the splits' sequence-level keys.

    Splits with the same token keys (probability bin, KV position, turn position) share one pass
    (segment keys: the union of theirs): their groups carry token columns only, which merge
    exactly over any key, so e.g. ``run x bin`` rolls up from ``run x turn_kind x bin``.
    """
    by_segment: dict[tuple[str, ...], list[str]] = {}
    merged: dict[tuple[str, ...], list[str]] = {}
    for split in splits:
        if token_keys(split):
            merged.setdefault(token_keys(split), []).extend(segment_keys(split))
    for split in splits:
        seg = segment_keys(split)
        if token_keys(split):
            seg = canonical(merged[token_keys(split)])
        by_segment.setdefault(seg, [])
        by_segment[seg] += [k for k in split if k not in SEGMENT_KEYS]
    return [Pass(seg, canonical([*keys, *seg])) for seg, keys in by_segment.items()]


def pass_for(split: Split, passes: list[Pass]) -> Pass:
    seg, tok = segment_keys(split), token_keys(split)
    if tok:
        return next(p for p in passes if p.token == tok and set(seg) <= set(p.segment))
    return next(p for p in passes if p.segment == seg)


@dataclass(frozen=True)
class Binning:
    """How the binned keys are cut: the position edges of ``kv_position``, ``turn_position``
    and ``length`` (``stats.positions``; the last bin is open), and the sequences per block of
    ``order``; and where the tail-robust metrics cut the log ratios (``stats.tails``)."""

    positions: tuple[int, ...] = LOG2_EDGES
    order_block: int = ORDER_BLOCK
    tails: Tails = DEFAULT_TAILS


DEFAULT_BINNING = Binning()


def step_span(lo: int, hi: int) -> str:
    """Steps ``lo`` to ``hi`` as ``--steps`` reads them: ``3-8``, or ``-6..-5`` with a negative."""
    return f"{lo}-{hi}" if lo >= 0 else f"{lo}..{hi}"


@dataclass(frozen=True)
class StepRange:
    """Inclusive bounds; None means open."""

    lo: int | None = None
    hi: int | None = None

    def overlaps(self, lo: int | None, hi: int | None) -> bool:
        if lo is None or hi is None:
            return True
        return (self.lo is None or hi >= self.lo) and (self.hi is None or lo <= self.hi)

    def __str__(self) -> str:
        """The range as ``--steps`` reads it back: ``42``, ``0..200``, ``150..``, ``..99``."""
        if self.lo is not None and self.lo == self.hi and self.lo >= 0:
            return str(self.lo)
        return f"{'' if self.lo is None else self.lo}..{'' if self.hi is None else self.hi}"


@dataclass(frozen=True)
class PartTask:
    """One token part to read, with what is constant over it, the sequence parts of its
    source (read for the keys that come from the sequence rows) and its MoE routing twin
    (``""`` when its source has no routes)."""

    run: str
    path: str
    tags: tuple[tuple[str, str], ...]
    rows: int
    sequences: tuple[str, ...] = ()
    routing: str = ""


@dataclass(frozen=True)
class RowFilter:
    """What is kept inside a part: a step range and/or one gpu (gpu is a per-row value)."""

    steps: StepRange | None = None
    gpu: str | None = None

    @property
    def active(self) -> bool:
        return self.steps is not None or self.gpu is not None


@dataclass
class Selection:
    """What a command reads: runs, the row filter, the source-tag filter, the token parts (one
    task each) and the sequence parts of each run."""

    runs: list[RunInfo]
    rows: RowFilter = field(default_factory=RowFilter)
    tags: dict[str, str] = field(default_factory=dict)  # source-level tag filter
    label: str = ""
    tasks: list[PartTask] = field(default_factory=list)
    sequence_paths: dict[str, list[str]] = field(default_factory=dict)
    store: Store | None = None  # where the runs' training-log metrics are read from
    named: bool = True  # the runs were named (not every run of the store, as found)

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.runs]

    @property
    def steps(self) -> StepRange | None:
        return self.rows.steps


def row_mask(table: pa.Table, rows: RowFilter) -> pa.Array:
    """Rows inside the step range and of the gpu (tables hold ``step`` and, if needed, ``gpu``);
    computed in numpy (pyarrow's comparisons with a Python value import pandas)."""
    step = table.column(S.STEP)
    mask = valid_of(step)
    if rows.steps is not None and (rows.steps.lo is not None or rows.steps.hi is not None):
        values = numpy_of(step, fill=0)
        if rows.steps.lo is not None:
            mask &= values >= rows.steps.lo
        if rows.steps.hi is not None:
            mask &= values <= rows.steps.hi
    if rows.gpu is not None:
        mask &= equal_to(table.column(S.GPU), rows.gpu)
    return arrow_of(mask)
