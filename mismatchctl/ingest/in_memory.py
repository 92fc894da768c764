"""Ingest of a table held in memory: the Parquet sequence layout ``DumpWriter`` writes, read by
the very reader and canonicalisation a file of it goes through, without the file.

The table is written to an uncompressed Parquet buffer in memory and opened from there, so the
rows stored are those ``ingest`` stores from the file ``DumpWriter`` would have written (the same
checks, turns, counts, sequence ids and default sample ids, ``<name stem>#<row>``). One call is
one transaction: its parts are staged, then committed with one source record, or nothing is.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl.allocator import keep_freed_memory
from mismatchctl.ingest.detect import unreadable
from mismatchctl.ingest.duplicates import KEY
from mismatchctl.ingest.parquet_sequence import open_sequence
from mismatchctl.ingest.run_ingest import (
    STAGING_PARTS,
    FileResult,
    IngestResult,
    Options,
    SilentProgress,
    count_repeats,
    finish_notes,
    source_record,
    stage_source,
)
from mismatchctl.options import FORMAT_SEQUENCE
from mismatchctl.store.parts import Lanes
from mismatchctl.store.store import Store, check_run_name
from mismatchctl.store.writable import StoreWrites


def parquet_bytes(table: pa.Table) -> pa.Buffer:
    """The table as an uncompressed Parquet file in memory (what is read, and fingerprinted)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="none")
    return sink.getvalue()


def ingest_table(store: Store, table: pa.Table, name: str, opts: Options) -> IngestResult:
    """Ingest ``table`` into ``opts.run`` as the source ``name`` (a file name such as
    ``step_00000007.parquet``: messages and the run's provenance name it, and rows without a
    sample id are ``<stem>#<row>``). A table whose content the run already holds is not stored
    twice (status ``already ingested``, as for a file)."""
    check_run_name(opts.run)
    keep_freed_memory()
    buffer = parquet_bytes(table)
    fingerprint = "sha256:" + hashlib.sha256(memoryview(buffer)).hexdigest()
    result = IngestResult(opts.run, str(store), [])
    with store.transaction() as txn, Lanes() as lanes:
        known = txn.known_fingerprint(opts.run, fingerprint)
        if known is not None:
            status = FileResult(Path(name), known.format, "already ingested", known, known.path)
            result.files.append(status)
            return result
        pf = pq.ParquetFile(pa.BufferReader(buffer))
        try:
            source = open_sequence(Path(name), opts.mapping, name, opts.attrs, pf=pf)
            seq = txn.next_seq(opts.run)
            parts, tally, ctx = stage_source(txn, source, name, opts, seq, SilentProgress(), lanes)
        except (pa.ArrowException, OSError, EOFError) as exc:
            raise unreadable(name, FORMAT_SEQUENCE, exc) from None
        with StoreWrites(store.root, STAGING_PARTS):
            lanes.wait()  # every part written
        finish_notes(source, name, tally, ctx)
        tags = {**source.tags, **opts.tags}
        record = source_record(
            name, fingerprint, buffer.size, FORMAT_SEQUENCE, source.columns, tags,
            source.notes, tally,
        )  # fmt: skip
        keys = np.concatenate(ctx.keys) if ctx.keys else np.zeros(0, KEY)
        count_repeats([record], [keys], tally)
        txn.commit(opts.run, [(record, parts)])
    result.files.append(FileResult(Path(name), FORMAT_SEQUENCE, "ingested", record))
    result.tally.add(tally)
    return result
