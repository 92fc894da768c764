"""Writing immutable Parquet parts into a staging directory, a source at a time.

Token parts are cut at sequence boundaries (a sequence's tokens stay together and in order) before
they would exceed ``PART_TOKENS`` rows (a single larger batch still makes one part), so a reader can
compute per-sequence metrics part by part with bounded memory.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import deque
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


class PartWriter:
    """Streams one kind of canonical rows of one source into parts under ``staging``.

    Encoding and compressing run on a background thread (pyarrow releases the GIL), so the
    reading and canonicalising of the next batch overlap with writing this one; at most
    ``PENDING`` batches wait, which bounds memory. Errors surface at the next ``write`` or at
    ``close``; ``shutdown`` stops the thread (call it when the ingest fails).
    """

    PENDING = 2

    def __init__(self, staging: Path, kind: str, run: str, schema: pa.Schema, limit: int) -> None:
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
        self._stats: dict = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="part-writer")
        self._pending: deque[Future[None]] = deque()

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
        while len(self._pending) >= self.PENDING:
            self._pending.popleft().result()
        self._pending.append(
            self._pool.submit(writer.write_table, table, row_group_size=ROW_GROUP_ROWS)
        )
        self._update(table)

    def close(self) -> list[PartRecord]:
        try:
            self._close()
        finally:
            self._pool.shutdown(wait=True)
        return self.parts

    def shutdown(self) -> None:
        """Stop writing (after an error elsewhere): wait for the thread, close the open file."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pending.clear()
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
            self._writer = None

    def _drain(self) -> None:
        while self._pending:
            self._pending.popleft().result()

    def _open(self) -> None:
        rel = f"{part_dir(self.kind, self.run)}/part-{self.tag}-{len(self.parts):05d}.parquet"
        target = self.staging / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(
            target,
            self.schema,
            compression=COMPRESSION,
            # dictionary pages where values repeat (ids, steps, turns, gpus): smaller and faster
            # than plain; floats byte-stream-split (exponent bytes together): both measured
            use_dictionary=[f.name for f in self.schema if f.name in DICTIONARY_COLUMNS],
            use_byte_stream_split=[f.name for f in self.schema if pa.types.is_floating(f.type)],
            write_page_checksum=True,  # `runs check --deep` verifies every page's CRC
        )
        self._stats = {"path": rel, "rows": 0, "steps": [], "seqs": []}

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
        self._drain()
        self._writer.close()
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
