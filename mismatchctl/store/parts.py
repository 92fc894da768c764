"""Writing immutable Parquet parts into a staging directory, a source at a time.

Token parts are cut at sequence boundaries (a sequence's tokens stay together and in order) before
they would exceed ``PART_TOKENS`` rows (a single larger batch still makes one part), so a reader can
compute per-sequence metrics part by part with bounded memory.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mismatchctl import schema as S
from mismatchctl.store.catalog import PartRecord

PART_TOKENS = 1_000_000
ROW_GROUP_ROWS = 1_000_000
COMPRESSION = "zstd"
TOKENS = "tokens"
SEQUENCES = "sequences"
METRICS = "metrics"


def part_dir(kind: str, run: str) -> str:
    """Relative directory of a run's parts: hive-style, so DuckDB and Polars see a ``run`` column."""
    return f"{kind}/{S.RUN}={run}"


class PartWriter:
    """Streams one kind of canonical rows of one source into parts under ``staging``."""

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

    def write(self, table: pa.Table) -> None:
        """Append whole sequences; start a new part first when the current one is full."""
        if table.num_rows == 0:
            return
        if self._writer is not None and self._stats["rows"] + table.num_rows > self.limit:
            self._close()
        if self._writer is None:
            self._open()
        assert self._writer is not None
        self._writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        self._update(table)

    def close(self) -> list[PartRecord]:
        self._close()
        return self.parts

    def _open(self) -> None:
        rel = f"{part_dir(self.kind, self.run)}/part-{self.tag}-{len(self.parts):05d}.parquet"
        target = self.staging / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(target, self.schema, compression=COMPRESSION)
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
