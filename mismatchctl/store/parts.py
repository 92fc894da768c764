"""Writing immutable Parquet parts into a staging directory, a source at a time.

Token parts are cut at sequence boundaries (a sequence's tokens stay together and in order) before
they would exceed ``PART_TOKENS`` rows (a single larger batch still makes one part), so a reader can
compute per-sequence metrics part by part with bounded memory.
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl import schema as S
from mismatchctl.columns import numpy_of
from mismatchctl.store.catalog import PartRecord

PART_TOKENS = 1_000_000
ROW_GROUP_ROWS = 262_144  # readers stream a part a row group at a time
COMPRESSION = "zstd"
# The logprob columns, byte-stream-split, compress to about half with either codec; LZ4 decodes
# them 2.6x and encodes them 1.4x as fast as zstd, for 30% more bytes (bench/, measured).
FLOAT_COMPRESSION = "lz4"
# The other columns of token parts too: zstd makes a compression context per page (10% of an
# ingest's CPU with its zeroed tables), and the dictionary indices and small ints compress about
# as well with LZ4 (a 100M store 5% larger; its ingest 10% and its read 12% faster, measured).
TOKEN_COMPRESSION = "lz4"
# Bytes a part's file gathers before a write: a Parquet writer writes every page (and its
# header) by itself, each a system call, and asks the file's position between them.
SINK_BUFFER = 1 << 20
DICTIONARY_COLUMNS = {S.STEP, S.SEQ, S.SAMPLE_ID, S.TURN, S.GPU, S.ROUTE_TOP_K}
TOKENS = "tokens"
SEQUENCES = "sequences"
METRICS = "metrics"
ROUTING = "routing"  # MoE routing rows, row for row beside a source's token parts
MASKED = "masked"  # token ids of the masked positions inside a sequence (its tool responses)
TOKENS_DIR, ROUTING_DIR = f"/{TOKENS}/", f"/{ROUTING}/"


def twin_path(token_path: str) -> str:
    """The routing part of a token part (the same name under ``routing/``)."""
    head, sep, tail = token_path.rpartition(TOKENS_DIR)
    return head + ROUTING_DIR + tail if sep else token_path


def read_columns(
    path: str | Path, columns: list[str] | tuple[str, ...], optional: tuple[str, ...] = ()
) -> pa.Table:
    """These columns of one Parquet file, and those of ``optional`` it has (``pq.read_table``
    goes through pyarrow's datasets, which import pandas: 0.4 s and 37 MB of a command for
    nothing it uses)."""
    with pq.ParquetFile(path) as pf:
        names = set(pf.schema_arrow.names) if optional else set()
        return pf.read(columns=[*columns, *(c for c in optional if c in names)])


def part_dir(kind: str, run: str) -> str:
    """Relative directory of a run's parts: hive-style, so DuckDB and Polars see a ``run`` column."""
    return f"{kind}/{S.RUN}={run}"


def whole_sequence_groups(table: pa.Table, limit: int = ROW_GROUP_ROWS) -> list[pa.Table]:
    """``table`` (whole sequences, each contiguous) cut at sequence starts into row groups of at
    most ``limit`` rows (a longer sequence is a row group of its own): a reader then gets whole
    sequences from every row group, without stitching (see ``engines.local.part_slices``)."""
    n = table.num_rows
    if n <= limit:
        return [table]
    seq = numpy_of(table.column(S.SEQ))
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    cuts = [0]
    while n - cuts[-1] > limit:
        j = int(np.searchsorted(starts, cuts[-1] + limit, side="right")) - 1
        cut = int(starts[j])
        if cut <= cuts[-1]:  # one sequence longer than a row group: it ends the group
            nxt = int(np.searchsorted(starts, cuts[-1], side="right"))
            cut = int(starts[nxt]) if nxt < len(starts) else n
        cuts.append(cut)
    cuts.append(n)
    return [table.slice(a, b - a) for a, b in itertools.pairwise(cuts) if b > a]


class Lanes:
    """Background threads that encode, compress and write parts (pyarrow releases the GIL).

    A part's writes stay on one lane, in order; the parts a writer keeps open at once go to
    different lanes, so they are encoded in parallel while the caller reads and canonicalises
    the next batches. At most ``PENDING`` tasks per lane wait, which
    bounds memory. Errors surface at the next ``submit`` or at ``wait``.
    """

    PENDING = 4

    def __init__(self, n: int = 2) -> None:
        self._pools = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"part-writer-{i}")
            for i in range(n)
        ]
        self._pending: deque[Future[object]] = deque()

    def lane(self, slot: int) -> int:
        """The lane of a writer's ``slot``-th open part."""
        return slot % len(self._pools)

    def submit(self, lane: int, fn: Callable[..., object], *args: object, **kw: object) -> None:
        while len(self._pending) >= self.PENDING * len(self._pools):
            self._pending.popleft().result()
        self._pending.append(self._pools[lane].submit(fn, *args, **kw))

    def wait(self) -> None:
        """Until everything submitted is written (raises the first error)."""
        while self._pending:
            self._pending.popleft().result()

    def stop(self) -> None:
        """Drop what has not started, wait for what has (after an error elsewhere)."""
        for pool in self._pools:
            pool.shutdown(wait=True, cancel_futures=True)
        self._pending.clear()

    def __enter__(self) -> Lanes:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            self.stop()
            return
        try:
            self.wait()
        finally:
            for pool in self._pools:
                pool.shutdown(wait=True)


class _OpenPart:
    """A part being written: its file writer, its lane and what the catalog records of it."""

    def __init__(self, writer: pq.ParquetWriter, sink: pa.NativeFile, rel: str, lane: int) -> None:
        self.writer, self.sink, self.rel, self.lane = writer, sink, rel, lane
        self.rows = 0
        self.steps: list[int] = []
        self.seqs: list[int] = []

    def update(self, table: pa.Table) -> None:
        import pyarrow.compute as pc  # loaded by writers only: readers start faster

        self.rows += table.num_rows
        steps = pc.min_max(table.column(S.STEP))
        seqs = pc.min_max(table.column(S.SEQ))
        self.steps += [steps["min"].as_py(), steps["max"].as_py()]
        self.seqs += [seqs["min"].as_py(), seqs["max"].as_py()]

    def close(self) -> None:
        """The file complete: the Parquet footer written, the buffered bytes flushed."""
        try:
            self.writer.close()
        finally:
            self.sink.close()

    def record(self, kind: str) -> PartRecord:
        steps, seqs = self.steps, self.seqs
        return PartRecord(kind, self.rel, self.rows, min(steps), max(steps), min(seqs), max(seqs))


class PartWriter:
    """Streams one kind of canonical rows of one source into parts under ``staging``.

    Writing happens on ``lanes`` (see :class:`Lanes`); with none given the writer has one lane
    of its own and ``close`` waits for it. With shared lanes, ``close`` only queues the closing
    of the open parts: the files are complete after ``lanes.wait()``. After an error, stop the
    lanes first, then call ``shutdown`` to close the open files.

    ``slots`` parts are open at once and consecutive batches go to them in turn, each part on
    its own lane, so that one source's parts are encoded in parallel (a part holds whole
    sequences in order; with several slots, the parts' sequence ranges interleave). The other
    slots open once the first part holds half a part, so a small source still makes one part.
    """

    def __init__(
        self,
        staging: Path,
        kind: str,
        run: str,
        schema: pa.Schema,
        limit: int,
        lanes: Lanes | None = None,
        slots: int = 1,
    ) -> None:
        self.staging, self.kind, self.run, self.schema, self.limit = (
            staging,
            kind,
            run,
            schema,
            limit,
        )
        self.tag = uuid.uuid4().hex[:12]
        self.parts: list[PartRecord] = []
        self._own = lanes is None
        self.lanes = Lanes(1) if lanes is None else lanes
        self._file_schema = S.dictionary_strings(schema)
        self._open: list[_OpenPart | None] = [None] * max(1, slots)
        self._made = 0  # parts opened so far (names them)
        self._turn = 0  # the slot of the next batch

    def write(self, table: pa.Table) -> None:
        """Append whole sequences to the next slot's part; start a new part first when that one
        is full."""
        if table.num_rows == 0:
            return
        first = self._open[0]
        if self._made == 1 and first is not None and first.rows < self.limit // 2:
            slot = 0  # a small source stays one part: the other slots open past half a part
        else:
            slot = self._turn
            self._turn = (slot + 1) % len(self._open)
        part = self._open[slot]
        if part is not None and part.rows + table.num_rows > self.limit:
            self._close(slot)
            part = None
        if part is None:
            part = self._open[slot] = self._start(slot)
        if table.schema != self._file_schema:
            table = table.cast(self._file_schema)
        for group in whole_sequence_groups(table):
            self.lanes.submit(part.lane, part.writer.write_table, group, len(group) or 1)
        part.update(table)

    def close(self) -> list[PartRecord]:
        for slot in range(len(self._open)):
            self._close(slot)
        if self._own:
            with self.lanes:
                pass
        return self.parts

    def shutdown(self) -> None:
        """Stop writing (after an error elsewhere): stop an own lane, close the open files."""
        if self._own:
            self.lanes.stop()
        for slot, part in enumerate(self._open):
            if part is not None:
                with contextlib.suppress(Exception):
                    part.close()
                self._open[slot] = None

    def _start(self, slot: int) -> _OpenPart:
        rel = f"{part_dir(self.kind, self.run)}/part-{self.tag}-{self._made:05d}.parquet"
        self._made += 1
        target = self.staging / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        sink = pa.BufferedOutputStream(pa.OSFile(str(target), "wb"), SINK_BUFFER)
        writer = pq.ParquetWriter(
            sink,
            self._file_schema,
            compression={f.name: self._codec(f) for f in self.schema},
            # dictionary pages where values repeat (ids, steps, turns, gpus): smaller and faster
            # than plain; floats byte-stream-split (exponent bytes together): both measured
            use_dictionary=[
                f.name
                for f in self.schema
                if f.name in DICTIONARY_COLUMNS or f.name.startswith(S.ATTR_COLUMN_PREFIX)
            ],
            use_byte_stream_split=[f.name for f in self.schema if pa.types.is_floating(f.type)],
            write_page_checksum=True,  # `runs check --deep` verifies every page's CRC
            # strings travel as dictionaries (S.dictionary_strings); without the Arrow schema in
            # the file, readers get them back as the plain strings of the store's schema
            store_schema=False,
            # min/max of ids and gpus: no query prunes on them, and they cost 10% of a write
            write_statistics=[f.name for f in self.schema if not pa.types.is_string(f.type)],
        )
        return _OpenPart(writer, sink, rel, self.lanes.lane(slot))

    def _codec(self, field: pa.Field) -> str:
        if pa.types.is_floating(field.type):
            return FLOAT_COMPRESSION
        return TOKEN_COMPRESSION if self.kind == TOKENS else COMPRESSION

    def _close(self, slot: int) -> None:
        part = self._open[slot]
        if part is None:
            return
        self.lanes.submit(part.lane, part.close)
        self.parts.append(part.record(self.kind))
        self._open[slot] = None
