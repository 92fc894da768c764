"""Writing immutable Parquet parts into a staging directory, a source at a time.

Token parts are cut at sequence boundaries (a sequence's tokens stay together and in order) before
they would exceed ``PART_TOKENS`` rows (a single larger batch still makes one part), so a reader can
compute per-sequence metrics part by part with bounded memory.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mismatchctl import schema as S
from mismatchctl.store.catalog import PartRecord

PART_TOKENS = 1_000_000
ROW_GROUP_ROWS = 262_144  # readers stream a part a row group at a time
COMPRESSION = "zstd"
DICTIONARY_COLUMNS = {S.STEP, S.SEQ, S.SAMPLE_ID, S.TURN, S.GPU}
TOKENS = "tokens"
SEQUENCES = "sequences"
METRICS = "metrics"


def part_dir(kind: str, run: str) -> str:
    """Relative directory of a run's parts: hive-style, so DuckDB and Polars see a ``run`` column."""
    return f"{kind}/{S.RUN}={run}"


class Lanes:
    """Background threads that encode, compress and write parts (pyarrow releases the GIL).

    A part's writes stay on one lane, in order; consecutive parts go to different lanes, so
    parts (of one source or of consecutive sources) are written in parallel while the caller
    reads and canonicalises the next batches. At most ``PENDING`` tasks per lane wait, which
    bounds memory. Errors surface at the next ``submit`` or at ``wait``.
    """

    PENDING = 2

    def __init__(self, n: int = 2) -> None:
        self._pools = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"part-writer-{i}")
            for i in range(n)
        ]
        self._pending: deque[Future[object]] = deque()
        self._next = 0

    def lane(self) -> int:
        """The lane of the next part."""
        i = self._next
        self._next = (i + 1) % len(self._pools)
        return i

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


class PartWriter:
    """Streams one kind of canonical rows of one source into parts under ``staging``.

    Writing happens on ``lanes`` (see :class:`Lanes`); with none given the writer has one lane
    of its own and ``close`` waits for it. With shared lanes, ``close`` only queues the closing
    of the last part: the files are complete after ``lanes.wait()``. After an error, stop the
    lanes first, then call ``shutdown`` to close the open file.
    """

    def __init__(
        self,
        staging: Path,
        kind: str,
        run: str,
        schema: pa.Schema,
        limit: int,
        lanes: Lanes | None = None,
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
        self._writer: pq.ParquetWriter | None = None
        self._lane = 0
        self._stats: dict = {}
        self._own = lanes is None
        self.lanes = Lanes(1) if lanes is None else lanes
        self._file_schema = S.dictionary_strings(schema)

    def write(self, table: pa.Table) -> None:
        """Append whole sequences; start a new part first when the current one is full."""
        if table.num_rows == 0:
            return
        if self._writer is not None and self._stats["rows"] + table.num_rows > self.limit:
            self._close()
        if self._writer is None:
            self._open()
        writer = self._writer
        assert writer is not None
        if table.schema != self._file_schema:
            table = table.cast(self._file_schema)
        self.lanes.submit(self._lane, writer.write_table, table, row_group_size=ROW_GROUP_ROWS)
        self._update(table)

    def close(self) -> list[PartRecord]:
        self._close()
        if self._own:
            with self.lanes:
                pass
        return self.parts

    def shutdown(self) -> None:
        """Stop writing (after an error elsewhere): stop an own lane, close the open file."""
        if self._own:
            self.lanes.stop()
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
            self._writer = None

    def _open(self) -> None:
        rel = f"{part_dir(self.kind, self.run)}/part-{self.tag}-{len(self.parts):05d}.parquet"
        target = self.staging / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(
            target,
            self._file_schema,
            compression=COMPRESSION,
            # dictionary pages where values repeat (ids, steps, turns, gpus): smaller and faster
            # than plain; floats byte-stream-split (exponent bytes together): both measured
            use_dictionary=[f.name for f in self.schema if f.name in DICTIONARY_COLUMNS],
            use_byte_stream_split=[f.name for f in self.schema if pa.types.is_floating(f.type)],
            write_page_checksum=True,  # `runs check --deep` verifies every page's CRC
            # strings travel as dictionaries (S.dictionary_strings); without the Arrow schema in the
            # file, readers get them back as the plain strings of the store's schema
            store_schema=False,
            # min/max of ids and gpus: no query prunes on them, and they cost 10% of a write
            write_statistics=[f.name for f in self.schema if not pa.types.is_string(f.type)],
        )
        self._stats = {"path": rel, "rows": 0, "steps": [], "seqs": []}
        self._lane = self.lanes.lane()

    def _update(self, table: pa.Table) -> None:
        st = self._stats
        st["rows"] += table.num_rows
        steps = pc.min_max(table.column(S.STEP))
        seqs = pc.min_max(table.column(S.SEQ))
        st["steps"] += [steps["min"].as_py(), steps["max"].as_py()]
        st["seqs"] += [seqs["min"].as_py(), seqs["max"].as_py()]

    def _close(self) -> None:
        if self._writer is None:
            return
        self.lanes.submit(self._lane, self._writer.close)
        st = self._stats
        self.parts.append(
            PartRecord(
                self.kind,
                st["path"],
                st["rows"],
                min(st["steps"]),
                max(st["steps"]),
                min(st["seqs"]),
                max(st["seqs"]),
            )
        )
        self._writer = None
