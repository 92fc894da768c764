"""The local engine: reads token parts (a few at a time, one part in memory per worker) and
folds them into mergeable partials, one dictionary of groups per planned pass.

Memory is bounded by ``workers`` x the largest part (parts hold about 1M tokens), never by
the number of tokens in the selection. Parts are processed by a thread pool: Parquet decoding and
the compiled kernels (``stats/kernels.py``, ``nogil``) release the GIL for most of their time.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, NamedTuple, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl import schema as S
from mismatchctl.allocator import keep_freed_memory
from mismatchctl.columns import numpy_of
from mismatchctl.engines import part_cache, part_lookup, seqrows
from mismatchctl.engines import plan as K
from mismatchctl.engines.keys import (
    Label,
    PartKeys,
    RunKeys,
    token_columns,
)
from mismatchctl.engines.part_fold import PartFold
from mismatchctl.engines.plan import DEFAULT_BINNING, Binning, PartTask, Pass, RowFilter, row_mask
from mismatchctl.engines.routing import join_twin, read_twin
from mismatchctl.engines.seqrows import SequenceRows
from mismatchctl.parallel import DEFAULT_WORKERS
from mismatchctl.stats import Partial
from mismatchctl.stats.turnruns import (
    NO_POSITIONS,
    NO_TOKEN_BINS,
    ONE_BIN,
    Positions,
    TokenBins,
    bin_cells,
    run_starts,
)
from mismatchctl.store.integrity import read_error

Groups = dict[tuple[Label, ...], Partial]
# Rows handed to the kernels at once (whole sequences): bounds their temporaries (~130 B/token).
SLICE_TOKENS = 262_144


class PartExtra(Protocol):
    """Something else computed from every part in the same read (e.g. figure densities): a
    mergeable state per part, folded with ``merge``. ``columns``: token columns it reads from
    the table beyond those of the passes; an extra may also name ``keys`` (a tuple of split
    keys it asks ``PartKeys`` for), so that the engine reads what they need (``position``, the
    source's sequence rows), and ``routing_columns`` (columns of the part's MoE routing twin,
    joined to the slices of parts that have one: ``engines/routing.py``). An extra whose state
    is large may also define ``compute_into(state, table, keys)``: the part's state so far
    (None for its first slice) with the slice added, in place where it can. For the part
    cache (``part_cache.py``): ``uses_runs`` False when its state never reads the engine's turn
    runs (it is then kept apart from the passes read with it), and ``cache_state(state)`` /
    ``from_cache(kept)`` when its state is kept in another form (``from_cache``: None when the
    kept state does not fit this extra: the part is read again)."""

    columns: tuple[str, ...]

    def compute(self, table: pa.Table, keys: PartKeys) -> Any: ...

    def merge(self, a: Any, b: Any) -> Any: ...


class Read(NamedTuple):
    """One selection's read: its parts, the passes and extras computed from them, the rows kept
    (``run_passes``' arguments)."""

    tasks: list[PartTask]
    passes: list[Pass]
    edges: np.ndarray
    rows: RowFilter | None = None
    extras: Sequence[PartExtra] = ()
    binning: Binning = DEFAULT_BINNING


Folded = tuple[list[Groups], list[Any]]  # every pass's groups, every extra's state


def run_passes(
    tasks: list[PartTask],
    passes: list[Pass],
    edges: np.ndarray,
    rows: RowFilter | None = None,
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    extras: Sequence[PartExtra] = (),
    binning: Binning = DEFAULT_BINNING,
) -> Folded:
    """For every pass, the merged partial of each group present in the selection; and the merged
    state of every extra (None when no part was read). Parts are merged in task order, and
    ``on_part`` is called from this thread. ``binning``: the position edges and order blocks."""
    return run_reads([Read(tasks, passes, edges, rows, extras, binning)], workers, on_part)[0]


def run_reads(
    reads: Sequence[Read],
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    on_read: Callable[[int, Folded], None] | None = None,
) -> list[Folded]:
    """``run_passes`` of several reads (the two sides of ``compare``) in one pool: the parts of
    every read in turn, each read folded on its own, so that the workers go from the last parts
    of one read to the first of the next without waiting. ``on_read(i, folded)`` is called from
    this thread as soon as read ``i`` is folded, while the parts of the next are read (it
    should return quickly: the parts in flight wait for this thread)."""
    keep_freed_memory()
    digests = [read_pieces(read) for read in reads]
    items = [(r, d, task) for r, d in zip(reads, digests, strict=True) for task in r.tasks]

    def one(item: tuple[Read, list[bytes | None], PartTask]) -> Folded:
        r, d, task = item
        found = part_lookup.look_up(r, d, task)
        if found.complete:
            return part_lookup.assemble(r, found, None)
        work = part_lookup.missing(r, found)  # the part read once, for what is missing only
        out = part_groups(task, work.passes, r.edges, r.rows, work.extras, r.binning)
        return part_lookup.assemble(r, found, out)

    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            done = _in_order(pool, one, items, max(1, workers) + 1)  # one part queued per pool
            return fold_reads(reads, done, on_part, on_read)
    finally:
        part_cache.evict_if_written()


def read_pieces(read: Read) -> list[bytes | None]:
    """What the part cache keys a read's pieces by besides the part (None: not cached)."""
    return part_cache.pieces(read.passes, read.edges, read.rows, read.extras, read.binning)


def fold_reads(
    reads: Sequence[Read],
    results: Iterator[Folded],
    on_part: Callable[[int], None] | None = None,
    on_read: Callable[[int, Folded], None] | None = None,
) -> list[Folded]:
    """Fold ``results`` (the parts of every read, in order) into one result per read; shared by
    the local and the Ray engine."""

    def parts(read: Read) -> Iterator[Folded]:
        for task in read.tasks:
            yield next(results)
            if on_part:
                on_part(task.rows)

    out = []
    for i, read in enumerate(reads):
        out.append(fold(parts(read), len(read.passes), read.extras))
        if on_read:
            on_read(i, out[-1])
    return out


def fold(results: Iterable[Folded], n_passes: int, extras: Sequence[PartExtra]) -> Folded:
    """Merge the parts' results, in the order given: every pass's groups, every extra's state
    (None when no part gave one). Shared by the local and the Ray engine."""
    totals: list[Groups] = [{} for _ in range(n_passes)]
    extra_totals: list[Any] = [None] * len(extras)
    for groups, states in results:
        for total, part in zip(totals, groups, strict=True):
            merge_into(total, part)
        for i, (extra, state) in enumerate(zip(extras, states, strict=True)):
            if state is not None:
                total = extra_totals[i]
                extra_totals[i] = state if total is None else extra.merge(total, state)
    return totals, extra_totals


def _in_order(pool: Executor, fn: Callable[[Any], Any], items: list, window: int) -> Iterator[Any]:
    """``pool.map(fn, items)`` with at most ``window`` items submitted and not yet consumed:
    results of fast parts do not pile up behind a slow one (memory stays flat)."""
    pending: deque[Future] = deque()
    for item in items:
        if len(pending) >= window:
            yield pending.popleft().result()
        pending.append(pool.submit(fn, item))
    while pending:
        yield pending.popleft().result()


def merge_into(total: Groups, part: Groups) -> None:
    for key, partial in part.items():
        total[key] = total[key].merge(partial) if key in total else partial


def part_groups(
    task: PartTask,
    passes: list[Pass],
    edges: np.ndarray,
    rows: RowFilter | None,
    extras: Sequence[PartExtra] = (),
    binning: Binning = DEFAULT_BINNING,
) -> tuple[list[Groups], list[Any]]:
    """Stream one part (only the needed columns) in batches of about ``SLICE_TOKENS`` rows and
    fold it a slice of whole sequences at a time: memory follows the slice, not the part."""
    keys = wanted_keys(passes, extras)
    columns = [S.STEP, S.SEQ, S.TURN, S.ROLLOUT, S.TRAINER]
    columns += [c for c in token_columns(keys) if c not in columns]
    columns += [c for e in extras for c in e.columns if c not in columns]
    if rows is not None and rows.gpu is not None and S.GPU not in columns:
        columns.append(S.GPU)
    fold = PartFold(passes, edges, binning)
    states: list[Any] = [None for _ in extras]
    wanted = tuple(dict.fromkeys(c for e in extras for c in getattr(e, "routing_columns", ())))
    try:
        sequences = _sequence_rows(task, keys)
        twin = read_twin(task, wanted) if wanted else None
        pf = pq.ParquetFile(task.path, read_dictionary=[S.GPU])
        offset = 0
        # a part written before token rows had an entropy lacks it: read as unknown (keys.py)
        present = [c for c in columns if c in pf.schema_arrow.names]
        for piece in part_slices(pf, present, threads="://" in str(task.path)):
            if twin is not None:  # the part's MoE routing rows, row for row
                piece = join_twin(piece, twin, offset, task)
            offset += piece.num_rows
            if rows is not None and rows.active:
                piece = piece.filter(row_mask(piece, rows))
            if piece.num_rows == 0:
                continue
            ctx = _Slice(task, edges, binning, sequences)
            states = _slice_groups(piece, ctx, passes, extras, states, fold)
    except (OSError, pa.ArrowException) as exc:  # damaged or removed since it was checked
        raise read_error(task.run, task.path, exc) from None
    return fold.groups(), states


def wanted_keys(passes: list[Pass], extras: Sequence[PartExtra] = ()) -> tuple[str, ...]:
    """Every key the passes group by and the extras ask for."""
    keys = [k for p in passes for k in p.keys]
    keys += [k for e in extras for k in getattr(e, "keys", ())]
    return tuple(dict.fromkeys(keys))


def _sequence_rows(task: PartTask, keys: tuple[str, ...]) -> SequenceRows | None:
    """The sequence rows of the part's source, when a key needs them."""
    needed = tuple(k for k in keys if K.needs_sequence_rows(k))
    if not needed:
        return None
    return seqrows.load(task.run, task.sequences, needed)


def part_slices(
    pf: pq.ParquetFile, columns: list[str], threads: bool = False
) -> Iterator[pa.Table]:
    """Tables of whole sequences from a part, about ``SLICE_TOKENS`` rows each: its row groups
    as they are when none splits a sequence (parts written since row groups were cut at
    sequence starts; told by the ``seq`` statistics), else batches stitched by
    :func:`sequence_slices`. A row group read alone is one chunk per column: no copies.
    ``threads``: decode on Arrow's threads. A part on disk is decoded on the calling thread: the
    engine's workers already fill the cores, and handing the columns to Arrow's threads left
    each worker waiting a third of its time (a 100M report 10% slower, measured). A part in a
    bucket keeps them as before: each column chunk is a request there, which they issue in
    parallel (not measured against a real bucket)."""
    if whole_sequence_row_groups(pf.metadata):
        for i in range(pf.num_row_groups):
            yield pf.read_row_group(i, columns=columns, use_threads=threads)
        return
    batches = pf.iter_batches(batch_size=SLICE_TOKENS, columns=columns, use_threads=threads)
    yield from sequence_slices(batches)


def whole_sequence_row_groups(meta: pq.FileMetaData) -> bool:
    """Whether no sequence spans two row groups: sequences are in ascending ``seq`` within a
    part, so it is when each row group's largest ``seq`` is below the next one's smallest."""
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    if S.SEQ not in names:
        return False
    col = names.index(S.SEQ)
    bounds = []
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(col).statistics
        if stats is None or not stats.has_min_max:
            return False
        bounds.append((stats.min, stats.max))
    return all(hi < lo for (_, hi), (lo, _) in itertools.pairwise(bounds))


def sequence_slices(batches: Iterable[pa.RecordBatch | pa.Table]) -> Iterator[pa.Table]:
    """Tables of whole sequences from consecutive batches of a part: each batch's rows up to
    the start of its last sequence, which waits for the next batch (a sequence never spans two
    parts, so the last one is whole at the end)."""
    carry: pa.Table | None = None
    for batch in batches:
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        if carry is not None and carry.num_rows:
            table = pa.concat_tables([carry, table])
        if table.num_rows == 0:
            carry = table
            continue
        seq = numpy_of(table.column(S.SEQ))
        last = int(np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])[-1])
        if last:
            yield table.slice(0, last)
        carry = table.slice(last)
    if carry is not None and carry.num_rows:
        yield carry


class _Slice(NamedTuple):
    """What every slice of one part shares."""

    task: PartTask
    edges: np.ndarray
    binning: Binning
    sequences: SequenceRows | None

    def keys(self, table: pa.Table) -> PartKeys:
        t = self.task
        return PartKeys(table, t.run, dict(t.tags), self.edges, self.binning, self.sequences)


def _slice_groups(
    table: pa.Table,
    ctx: _Slice,
    passes: list[Pass],
    extras: Sequence[PartExtra],
    states: list[Any],
    fold: PartFold,
) -> list[Any]:
    """One slice: per-token columns computed once, the tokens reduced once to cells of (turn run
    x token code) for the token keys any pass asks for (probability bin, KV position, turn
    position), kept in ``fold`` with each run's group in every pass (the passes' groups are
    computed once a part: ``part_fold.py``); and the extras' part states with the slice added."""
    keys = ctx.keys(table)
    if not passes:  # only the extras (explain's cube): no turn runs to reduce
        return _add_slice(extras, states, table, keys)
    lr, lt = keys.column(S.ROLLOUT), keys.column(S.TRAINER)
    seq, turn = keys.column(S.SEQ), keys.column(S.TURN)
    uses = tuple(any(p.uses[i] for p in passes) for i in range(len(K.TOKEN_KEYS)))
    starts = run_starts(seq, turn)
    # every key but the token keys is constant along a turn run (step and gpu are per sequence
    # in the store): its codes are those of each run's first token
    run_keys = keys.at(starts)
    cells = bin_cells(
        lr,
        lt,
        seq,
        turn,
        ctx.edges if uses[0] else ONE_BIN,
        with_hist=any(p.with_hist for p in passes),
        positions=_positions(keys, run_keys, ctx.binning, uses),
        starts=starts,
        tails=ctx.binning.tails,
        token_bins=_token_bins(keys, uses),
    )
    fold.add(cells, run_keys)
    keys.runs = cells.runs  # extras may reuse the turn runs' sums instead of re-reading the tokens
    keys.by_run = RunKeys(run_keys, np.diff(np.r_[starts, table.num_rows]))  # and their keys
    return _add_slice(extras, states, table, keys)


def _add_slice(
    extras: Sequence[PartExtra], states: list[Any], table: pa.Table, keys: PartKeys
) -> list[Any]:
    """Each extra's part state with this slice added: in place by the extra's ``compute_into``
    when it has one (a cube adds its tokens to the part's state: no new 8 MB state per slice),
    else its ``compute`` merged in."""
    out = []
    for extra, state in zip(extras, states, strict=True):
        into = getattr(extra, "compute_into", None)
        if into is not None:
            out.append(into(state, table, keys))
            continue
        new = extra.compute(table, keys)
        out.append(new if state is None else extra.merge(state, new))
    return out


def _token_bins(keys: PartKeys, uses: tuple[bool, ...]) -> TokenBins:
    """The entropy and trainer-probability codes of the slice's tokens, when a pass asks for
    either (``ent * n_pt + pt``; the codes of ``PartKeys``, so that the labels are theirs)."""
    if not (uses[3] or uses[4]):
        return NO_TOKEN_BINS
    code, n_ent, n_pt = np.zeros(keys.n, dtype=np.int64), 1, 1
    if uses[3]:
        kc = keys.get(K.ENTROPY)
        code, n_ent = kc.codes, len(kc.labels)
    if uses[4]:
        kc = keys.get(K.TRAINER_PROB)
        code, n_pt = code * len(kc.labels) + kc.codes, len(kc.labels)
    return TokenBins(code.astype(np.int32), n_ent, n_pt)


def _positions(
    keys: PartKeys, run_keys: PartKeys, binning: Binning, uses: tuple[bool, ...]
) -> Positions:
    """What the kernel needs for the KV-position and turn-position bins the passes ask for."""
    if not (uses[1] or uses[2]):
        return NO_POSITIONS
    edges = np.asarray(binning.positions, dtype=np.int64)
    if not uses[1]:
        return Positions(tp_edges=edges)
    return Positions(
        keys.column(S.POSITION),
        run_keys.prompt_lengths(),
        edges,
        edges if uses[2] else None,
    )
