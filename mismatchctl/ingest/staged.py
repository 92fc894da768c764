"""Parallel ingest: every input file read and canonicalised in its own task (Ray tasks for
``--engine ray``; threads for inputs on object storage with the local engine), writing the file's
parts into the transaction's staging directory; then one commit in the driver, all or nothing like
the local ingest (on any error, no part is committed and the staging directory goes).

With Ray the store must be on a filesystem that every worker sees under the same path. Sequence
ids are dense within a run and follow the order of the inputs, but how many sequences a file holds
is known only once it is read: each task numbers its file's sequences from 0, and the driver then
shifts each file's ids by the sequences of the files before it (a rewrite of the staged parts, in
tasks too) before the commit. The rows committed are those of a local ingest of the same inputs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mismatchctl import schema as S
from mismatchctl.allocator import keep_freed_memory
from mismatchctl.columns import scalar_of
from mismatchctl.display import file_label
from mismatchctl.errors import MismatchError, StoreError, UsageError
from mismatchctl.ingest import expand_inputs
from mismatchctl.ingest.canonical import Tally
from mismatchctl.ingest.duplicates import KEY
from mismatchctl.ingest.remote_inputs import ObjectPath, expand_remote, fetch, is_remote
from mismatchctl.ingest.run_ingest import (
    FileResult,
    IngestResult,
    Options,
    Progress,
    SilentProgress,
    content_of,
    count_repeats,
    ingest_source,
)
from mismatchctl.parallel import DEFAULT_WORKERS, Failure
from mismatchctl.store.catalog import PartRecord, SourceRecord
from mismatchctl.store.parts import MASKED, ROUTING, TOKENS, PartWriter
from mismatchctl.store.store import Store, Transaction, check_run_name

OnDone = Callable[[int, Any], None]
# Runs ``func(*args)`` for every args tuple; yields the results in order (a ``Failure`` is
# raised as its error, after the tasks still running are stopped).
MapTasks = Callable[[Callable[..., Any], Sequence[tuple], OnDone | None], Iterator[Any]]


@dataclass
class Staged:
    """What one task did with one input: its fingerprint and, unless the run already holds that
    content (``record`` None), the source record and the parts it staged (seq ids from 0)."""

    fingerprint: str
    record: SourceRecord | None = None
    parts: list[PartRecord] = field(default_factory=list)
    tally: Tally = field(default_factory=Tally)
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, KEY))  # sequence content keys


def stage_file(
    root: str, staging: str, item: str, opts: Options, known: frozenset[str], label: str
) -> Staged | Failure:
    """The body of one task: fingerprint one input and, if new to the run, stage its parts. An
    object-storage input is first copied to a local temporary file; its record keeps the URI.
    ``label`` names the input in messages (its path as given, or its URI)."""
    try:
        if not is_remote(item):
            return _stage(root, staging, Path(item), opts, known, label)
        with tempfile.TemporaryDirectory(prefix="mismatchctl-") as tmp:
            staged = _stage(root, staging, fetch(item, tmp), opts, known, label)
        if staged.record is not None:
            staged.record = dataclasses.replace(staged.record, path=item)
        return staged
    except MismatchError as exc:
        return Failure(exc)


def _stage(
    root: str, staging: str, file: Path, opts: Options, known: frozenset[str], label: str
) -> Staged:
    content = content_of(file, label)
    fp = content.fingerprint
    if fp in known:
        return Staged(fp)
    txn = Transaction(Store(Path(root)), Path(staging))
    keep_freed_memory()  # once per worker process
    done = ingest_source(txn, file, fp, opts, 0, SilentProgress(), label=label, content=content)
    return Staged(fp, done.record, done.parts, done.tally, done.keys)


def shift_parts(
    staging: str, run: str, parts: list[PartRecord], offset: int
) -> list[PartRecord] | Failure:
    """The body of one task: rewrite staged parts with ``offset`` added to every seq id (same
    writer, same encoding), removing the originals; their new records, in order."""
    try:
        shifted = [new for part in parts for new in _shift(Path(staging), run, part, offset)]
        return _twins(Path(staging), shifted)
    except (OSError, pa.ArrowException) as exc:
        return Failure(
            StoreError(
                f"cannot rewrite a staged part under {staging}: {exc}",
                "check that the store's filesystem has free space and is writable from every "
                "worker.",
            )
        )


def _twins(staging: Path, parts: list[PartRecord]) -> list[PartRecord]:
    """The rewritten routing parts renamed as the twins of the rewritten token parts (the k-th
    routing part of a source holds the rows of its k-th token part: ``docs/store.md``)."""
    tokens = [p for p in parts if p.kind == TOKENS]
    out, k = [], 0
    for part in parts:
        if part.kind == ROUTING:
            twin = tokens[k].path.replace(f"{TOKENS}/", f"{ROUTING}/", 1)
            os.replace(staging / part.path, staging / twin)
            part = dataclasses.replace(part, path=twin)
            k += 1
        out.append(part)
    return out


def _shift(staging: Path, run: str, part: PartRecord, offset: int) -> list[PartRecord]:
    """One staged part rewritten with shifted seq ids (its new record)."""
    source = staging / part.path
    table = pq.ParquetFile(source).read()
    if part.kind == TOKENS:
        schema = S.TOKEN_SCHEMA
    elif part.kind == MASKED:
        schema = S.MASKED_SCHEMA
    elif part.kind == ROUTING:  # its shape: the overlaps' width, the top-k column, full routes
        layers = table.schema.field(S.ROUTE_OVERLAP).type.byte_width
        top_k = int(table.column(S.ROUTE_TOP_K)[0].as_py()) if table.num_rows else 0
        schema = S.routing_schema(layers, top_k, S.ROLLOUT_ROUTES in table.column_names)
    else:  # the source's attribute columns kept
        schema = S.sequence_schema(S.attribute_names(table.column_names))
    table = table.select(schema.names).cast(schema)
    column = table.schema.get_field_index(S.SEQ)
    shifted = pc.add(table.column(column), scalar_of(offset, pa.int64()))
    table = table.set_column(column, schema.field(S.SEQ), shifted)
    writer = PartWriter(staging, part.kind, run, schema, 1 << 62)
    try:
        writer.write(table)
        records = writer.close()
    finally:
        writer.shutdown()
    source.unlink()
    return records


def expand_all(inputs: Iterable[str]) -> list[Path | ObjectPath]:
    """Local files, directories and globs, and object-storage URIs, in the order given."""
    found: list[Path | ObjectPath] = []
    for item in inputs:
        found.extend(expand_remote(item) if is_remote(item) else expand_inputs([item]))
    return list(dict.fromkeys(found))


def ingest_staged(
    store: Store,
    inputs: Iterable[str],
    opts: Options,
    map_tasks: MapTasks,
    progress: Progress | None = None,
) -> IngestResult:
    """``ingest_files`` with one task per input file (see the module doc)."""
    check_run_name(opts.run)
    if store.publishes:
        raise UsageError(
            f"`ingest --engine ray` writes into a store on a shared filesystem; {store} is in a "
            "bucket (workers cannot stage their parts there)",
            "ingest into it with the local engine (leave out --engine ray), or into a store on "
            "a shared filesystem.",
        )
    files = expand_all(inputs)
    progress = progress or SilentProgress()
    result = IngestResult(opts.run, str(store), [])
    with store.transaction() as txn:
        root, staging = os.path.abspath(store.root), os.path.abspath(txn.staging)
        known = frozenset(_known_fingerprints(store, opts.run))
        calls = [(root, staging, _task_input(f), opts, known, file_label(f)) for f in files]
        finished = 0

        def done(i: int, staged: Any) -> None:
            nonlocal finished
            finished += 1
            progress.file(files[i], finished, len(files))  # type: ignore[arg-type]
            if isinstance(staged, Staged):
                progress.tokens(staged.tally.model_tokens)

        kept: list[Staged] = []
        seen: dict[str, Path | ObjectPath] = {}
        with contextlib.closing(map_tasks(stage_file, calls, done)) as results:
            for path, staged in zip(files, results, strict=True):
                shown: Any = path  # FileResult.path: a Path, or an ObjectPath shown as its URI
                if staged.record is None:
                    record = txn.known_fingerprint(opts.run, staged.fingerprint)
                    assert record is not None
                    result.files.append(
                        FileResult(shown, record.format, "already ingested", record, record.path)
                    )
                elif staged.fingerprint in seen:  # the same content twice among the inputs
                    _discard(Path(staging), staged.parts)
                    same = str(seen[staged.fingerprint])
                    result.files.append(FileResult(shown, None, "duplicate input", same_as=same))
                else:
                    seen[staged.fingerprint] = path
                    kept.append(staged)
                    result.files.append(
                        FileResult(shown, staged.record.format, "ingested", staged.record)
                    )
                    result.tally.add(staged.tally)
        records = [s.record for s in kept if s.record is not None]
        count_repeats(records, [s.keys for s in kept], result.tally)
        if kept:
            parts = _renumber(map_tasks, staging, opts.run, kept, txn.next_seq(opts.run))
            txn.commit(opts.run, [(s.record, p) for s, p in zip(kept, parts, strict=True)])
    return result


def _renumber(
    map_tasks: MapTasks, staging: str, run: str, kept: list[Staged], first: int
) -> list[list[PartRecord]]:
    """Each file's parts with seq ids following those of the files before it (from ``first``):
    the parts of a file that already start there are kept, the others rewritten in tasks."""
    offsets, seq = [], first
    for staged in kept:
        assert staged.record is not None
        offsets.append(seq)
        seq += staged.record.sequences
    moved = [i for i, offset in enumerate(offsets) if offset]
    calls = [(staging, run, kept[i].parts, offsets[i]) for i in moved]
    out = [s.parts for s in kept]
    with contextlib.closing(map_tasks(shift_parts, calls, None)) as results:
        for i, parts in zip(moved, results, strict=True):
            out[i] = parts
    return out


def _task_input(path: Path | ObjectPath) -> str:
    return path.uri if isinstance(path, ObjectPath) else os.path.abspath(path)


def _known_fingerprints(store: Store, run: str) -> set[str]:
    if run not in store.run_names():
        return set()
    return {source.fingerprint for source in store.run(run).sources}


def _discard(staging: Path, parts: list[PartRecord]) -> None:
    for part in parts:
        (staging / part.path).unlink(missing_ok=True)


# --- where the tasks run --------------------------------------------------------------------


def ray_tasks(address: str | None, workers: int = DEFAULT_WORKERS) -> MapTasks:
    """Tasks on Ray (a local Ray with ``workers`` CPUs, or the cluster at ``address``)."""
    from mismatchctl.parallel import connect, ordered, remote

    ray = connect(address, workers)

    def map_tasks(
        func: Callable[..., Any], calls: Sequence[tuple], on_done: OnDone | None
    ) -> Iterator[Any]:
        task = remote(func)
        return ordered(ray, [task.remote(*args) for args in calls], on_done)

    return map_tasks


def thread_tasks(workers: int = DEFAULT_WORKERS) -> MapTasks:
    """Tasks on a pool of ``workers`` threads in this process."""

    def map_tasks(
        func: Callable[..., Any], calls: Sequence[tuple], on_done: OnDone | None
    ) -> Iterator[Any]:
        pool = ThreadPoolExecutor(max_workers=max(1, workers))
        futures = [pool.submit(func, *args) for args in calls]
        try:
            for i, future in enumerate(futures):
                value = future.result()
                if on_done:
                    on_done(i, value)
                if isinstance(value, Failure):
                    raise value.error
                yield value
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # none still writes afterwards

    return map_tasks
