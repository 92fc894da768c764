"""Ingest: dump files -> canonical rows -> staged parts -> one catalog commit (or nothing)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.allocator import keep_freed_memory
from mismatchctl.display import file_label, has_control, shown
from mismatchctl.errors import InputError, UsageError
from mismatchctl.ingest import detect_format, expand_inputs, open_source
from mismatchctl.ingest.canonical import Context, Tally, canonicalize
from mismatchctl.ingest.column_roles import parse_mapping
from mismatchctl.ingest.detect import removed_while_read, unreadable
from mismatchctl.ingest.duplicates import KEY, repeats_in_order
from mismatchctl.ingest.prefetch import prefetch
from mismatchctl.ingest.routing_parts import RoutingWriter, route_notes
from mismatchctl.ingest.routing_rows import RouteOptions, check_route_options
from mismatchctl.ingest.source import Source
from mismatchctl.ingest.unmasked import ALLOW_FLAG
from mismatchctl.options import IngestOptions
from mismatchctl.store import parts as store_parts
from mismatchctl.store.catalog import PartRecord, SourceRecord
from mismatchctl.store.parts import MASKED, SEQUENCES, TOKENS, Lanes, PartWriter
from mismatchctl.store.store import Store, Transaction, check_run_name, now
from mismatchctl.store.writable import StoreWrites

STAGING_PARTS = "writing the parts of the ingest"

TAG_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")
MAX_TAG_VALUE = 256


class Progress(Protocol):
    def file(self, path: Path, index: int, total: int) -> None: ...
    def tokens(self, count: int) -> None: ...


class SilentProgress:
    """A Progress that shows nothing (library calls, Ray tasks)."""

    def file(self, path: Path, index: int, total: int) -> None:
        pass

    def tokens(self, count: int) -> None:
        pass


@dataclass
class FileResult:
    path: Path
    format: str | None
    status: str  # "ingested" | "already ingested" | "duplicate input"
    record: SourceRecord | None = None
    same_as: str | None = None


@dataclass
class IngestResult:
    run: str
    store: str  # the store's directory or URI
    files: list[FileResult]
    tally: Tally = field(default_factory=Tally)

    @property
    def ingested(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "ingested"]

    @property
    def warnings(self) -> list[str]:
        """What the user should know although the ingest succeeded: a file, or the whole call,
        that adds no model token (every position masked, or every sample dropped)."""
        out = [
            f"{file_label(f.path)} adds no model token ({_nothing(f.record)})"
            for f in self.ingested
            if f.record is not None and f.record.model_tokens == 0
        ]
        if self.ingested and self.tally.model_tokens == 0:
            out.append(
                f"this ingest adds no model token to run `{self.run}`: there is nothing to "
                "report on; check the mask (`--map mask=<column>`, 1 = model token)"
            )
        return out


def _nothing(record: SourceRecord) -> str:
    if record.sequences == 0:
        return f"all {record.dropped_sequences:,} samples dropped as bad"
    what = f"every position of its {record.sequences:,} sequences is masked"
    return what + (f"; {record.dropped_sequences:,} dropped" if record.dropped_sequences else "")


def parse_tags(items: Iterable[str]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not TAG_KEY.fullmatch(key) or not value:
            raise UsageError(
                f"--tag `{shown(item, 80)}` is not KEY=VALUE",
                "write e.g. --tag gpu=A100 --tag engine=vllm-0.18.1 (keys: letters, digits, "
                "`_`, `.`, `-`).",
            )
        if has_control(value) or len(value) > MAX_TAG_VALUE:
            raise UsageError(
                f"--tag `{shown(item, 80)}`: the value has {len(value)} characters"
                + (" and control characters" if has_control(value) else ""),
                f"use printable text of at most {MAX_TAG_VALUE} characters (tags are shown in "
                "terminals and HTML reports).",
            )
        tags[key] = value
    return tags


@dataclass(frozen=True)
class Content:
    """A file's content as hashed: its fingerprint, and its size and modification time then
    (the same before and after the hash: a file written meanwhile is refused)."""

    fingerprint: str
    size: int
    mtime_ns: int


class ChangedWhileRead(InputError):
    """An input that its writer changed while it was being read: what was read is no one
    state of the file, so none of it is kept."""


def changed_while_read(label: str, before: int, after: int) -> ChangedWhileRead:
    return ChangedWhileRead(
        f"{label} changed while it was being read ({before:,} bytes, then {after:,}): nothing "
        "of it was ingested",
        "ingest it once its writer has finished it (`mismatchctl watch` waits for that).",
    )


def content_of(path: Path, label: str | None = None) -> Content:
    """The input's fingerprint, size and time, from one open descriptor; an input that cannot
    be read, or vanished, is an InputError naming it (by ``label``, default its path as given)."""
    label = label or file_label(path)
    try:
        with path.open("rb") as fh:
            before = os.fstat(fh.fileno())
            digest = "sha256:" + hashlib.file_digest(fh, "sha256").hexdigest()
            after = os.fstat(fh.fileno())
    except OSError as exc:
        raise unreadable(label, "a file", exc) from None
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
        raise changed_while_read(label, before.st_size, after.st_size)
    return Content(digest, after.st_size, after.st_mtime_ns)


def prefix_fingerprint(path: Path, size: int) -> str | None:
    """The fingerprint of the first ``size`` bytes of ``path`` (None when it is shorter): equal
    to an earlier fingerprint, the file grew by appending after that content."""
    digest = hashlib.sha256()
    left = size
    with path.open("rb") as fh:
        while left:
            block = fh.read(min(left, 1 << 20))
            if not block:
                return None
            digest.update(block)
            left -= len(block)
    return "sha256:" + digest.hexdigest()


@dataclass
class Options:
    run: str
    tags: dict[str, str]
    fmt: str | None
    mapping: Mapping[str, str]
    skip_bad: bool
    trust_pickle: bool = False  # full unpickling of .pt files (runs any code in them); verl pickles
    allow_padding: bool = False  # keep trailing padding of a dump without mask as tokens
    attrs: tuple[str, ...] = ()  # columns kept as per-sequence attributes (--attr)
    routes: RouteOptions = field(default_factory=RouteOptions)  # MoE routes (--routes-*)
    keep_masked: bool = True  # the token ids of tool responses (masked/ parts; --no-keep-masked)


def options_of(run: str, given: IngestOptions) -> Options:
    """The ingest of ``run`` with the reading options as given (tags and the column map as
    ``KEY=VALUE`` strings or mappings), checked: a bad tag, map or route option is a UsageError."""
    tags = given.tags
    mapping = given.mapping
    routes = RouteOptions(
        given.routes_aligned, given.num_experts, given.keep_routes, given.routes_topk
    )
    return Options(
        run=run,
        tags=dict(tags) if isinstance(tags, Mapping) else parse_tags(_items(tags)),
        fmt=given.fmt,
        mapping=dict(mapping) if isinstance(mapping, Mapping) else parse_mapping(_items(mapping)),
        skip_bad=given.skip_bad,
        trust_pickle=given.trust_pickle,
        allow_padding=given.allow_padding,
        attrs=tuple(dict.fromkeys(_items(given.attrs))),
        routes=check_route_options(routes),
        keep_masked=given.keep_masked,
    )


def _items(value: str | Iterable[str] | None) -> list[str]:
    """One string is one item, never its characters (``tags="gpu=H20"``); None is none."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def ingest_files(
    store: Store,
    inputs: Iterable[str],
    opts: Options,
    progress: Progress | None = None,
    replacing: int | None = None,
) -> IngestResult:
    """``replacing``: the id of a source of the run that this ingest replaces, in its commit
    (``watch``: a file that grew after it was ingested is ingested again as a whole)."""
    check_run_name(opts.run)
    keep_freed_memory()
    files = expand_inputs(inputs)
    progress = progress or SilentProgress()
    result = IngestResult(opts.run, str(store), [])
    with store.transaction() as txn, Lanes() as lanes:
        staged: list[tuple[SourceRecord, list[PartRecord]]] = []
        keys: list[np.ndarray] = []
        seen: dict[str, Path] = {}
        seq = txn.next_seq(opts.run)
        sizes: set[int] = set()  # of the files before: a file of another size is not skipped
        for index, (path, pending) in enumerate(zip(files, hashed_ahead(files), strict=True)):
            progress.file(path, index, len(files))
            if not _may_repeat(txn, path, opts.run, sizes):
                done = _read_beside_hash(txn, path, pending, opts, seq, progress, lanes)
            else:
                content = pending.result()
                skipped = _skip(txn, path, content.fingerprint, opts.run, seen, replacing)
                if skipped is not None:
                    result.files.append(skipped)
                    sizes.add(content.size)
                    continue
                fp = content.fingerprint
                done = ingest_source(txn, path, fp, opts, seq, progress, lanes, content=content)
            seen[done.record.fingerprint] = path
            sizes.add(done.record.size)
            seq += done.record.sequences
            staged.append((done.record, done.parts))
            keys.append(done.keys)
            result.files.append(FileResult(path, done.record.format, "ingested", done.record))
            result.tally.add(done.tally)
        with StoreWrites(store.root, STAGING_PARTS):
            lanes.wait()  # every part written
        count_repeats([record for record, _ in staged], keys, result.tally)
        if staged:
            txn.commit(opts.run, staged, replacing)
    return result


def count_repeats(records: list[SourceRecord], keys: list[np.ndarray], tally: Tally) -> None:
    """Each source's exact duplicate sequences: repeats of a sequence of the same step met
    earlier in that file or in an earlier file of this ingest (``ingest.duplicates``)."""
    for record, count in zip(records, repeats_in_order(keys), strict=True):
        record.duplicate_sequences = count
    tally.duplicate_sequences = sum(r.duplicate_sequences or 0 for r in records)


def hashed_ahead(files: list[Path]) -> Iterator[Future[Content]]:
    """Each file's :func:`content_of`, hashed on a thread (hashlib releases the GIL) a file
    ahead: the next file's hash runs while this one is read."""
    with ThreadPoolExecutor(1, thread_name_prefix="hash") as pool:
        try:
            ahead = [pool.submit(content_of, path) for path in files[:1]]
            for i in range(len(files)):
                if i + 1 < len(files):
                    ahead.append(pool.submit(content_of, files[i + 1]))
                yield ahead.pop(0)
        finally:  # an error: the files not started are not hashed
            pool.shutdown(wait=True, cancel_futures=True)


def _may_repeat(txn: Transaction, path: Path, run: str, sizes: set[int]) -> bool:
    """Whether ``path`` may hold the content of a source of the run or of a file before it in
    this ingest (``sizes``), then skipped once hashed: same content, same size. A file that
    cannot be read: True (its hash says why, as before the read)."""
    try:
        size = os.stat(path).st_size
    except OSError:
        return True
    return size in sizes or txn.has_size(run, size)


def _read_beside_hash(
    txn: Transaction,
    path: Path,
    pending: Future[Content],
    opts: Options,
    seq: int,
    progress: Progress,
    lanes: Lanes,
) -> Ingested:
    """A file no source can repeat (:func:`_may_repeat`) read while it is hashed: it is not
    skipped whatever its hash. Its size and time before the read, before and after the hash
    and after the read are the same, else it changed meanwhile and is refused."""
    before = os.stat(path)
    try:
        done = ingest_source(txn, path, "", opts, seq, progress, lanes)
    except Exception:
        pending.result()  # a file that could not be hashed, or changed: said first, as before
        raise
    content = pending.result()
    _unchanged(path, file_label(path), content)
    if (before.st_size, before.st_mtime_ns) != (content.size, content.mtime_ns):
        raise changed_while_read(file_label(path), before.st_size, content.size)
    done.record = dataclasses.replace(done.record, fingerprint=content.fingerprint)
    return done


def _skip(
    txn: Transaction,
    path: Path,
    fp: str,
    run: str,
    seen: dict[str, Path],
    replacing: int | None = None,
) -> FileResult | None:
    if fp in seen:
        return FileResult(path, None, "duplicate input", same_as=str(seen[fp]))
    known = txn.known_fingerprint(run, fp)
    if known is not None and known.id != replacing:
        return FileResult(path, known.format, "already ingested", known, same_as=known.path)
    return None


@dataclass
class Ingested:
    """One source read into the staging directory: its record, parts and tally, and the content
    key of each sequence (``ingest.duplicates``), for the duplicate count of the whole ingest."""

    record: SourceRecord
    parts: list[PartRecord]
    tally: Tally
    keys: np.ndarray


def ingest_source(
    txn: Transaction,
    path: Path,
    fp: str,
    opts: Options,
    seq: int,
    progress: Progress,
    lanes: Lanes | None = None,
    label: str | None = None,
    content: Content | None = None,
) -> Ingested:
    """Read, canonicalise and queue the writing of one source's parts (on ``lanes``: the
    files are complete once they are waited for; with none, when this returns). ``label``
    names the file in messages (default: its path as given); ``content``: the file as it was
    hashed (then a file removed or changed since is refused: what was read would not be
    what the fingerprint says).

    The seam the staged (Ray) ingest builds on: one source into one transaction's staging
    directory, sequence ids from ``seq``; the caller commits."""
    label = label or file_label(path)
    try:
        fmt = detect_format(path, opts.mapping, opts.fmt, label)
    except OSError as exc:  # removed, or not readable, before its format was known
        raise unreadable(label, "a dump", exc) from None
    try:
        source = open_source(path, fmt, opts.mapping, opts.trust_pickle, label, opts.attrs)
        parts, tally, ctx = stage_source(txn, source, label, opts, seq, progress, lanes)
    except (pa.ArrowException, OSError, EOFError) as exc:
        raise unreadable(label, fmt, exc) from None
    size = _unchanged(path, label, content)
    tags = {**source.tags, **opts.tags}
    finish_notes(source, label, tally, ctx)
    record = source_record(
        str(path.resolve()), fp, size, fmt, source.columns, tags, source.notes, tally
    )
    keys = np.concatenate(ctx.keys) if ctx.keys else np.zeros(0, KEY)
    return Ingested(record, parts, tally, keys)


def stage_source(
    txn: Transaction,
    source: Source,
    label: str,
    opts: Options,
    seq: int,
    progress: Progress,
    lanes: Lanes | None = None,
) -> tuple[list[PartRecord], Tally, Context]:
    """Canonicalise an opened source's batches and queue the writing of its parts (token,
    sequence, routing and masked parts) into the transaction's staging directory, sequence ids
    from ``seq``: what every source goes through, read from a file or handed over in memory
    (``ingest.in_memory``)."""
    tags = {**source.tags, **opts.tags}
    ctx = Context(label, tags.get(S.TAG_GPU), opts.skip_bad, seq, opts.allow_padding, [])
    ctx.attributes = list(source.attributes)
    ctx.batch_columns = dict(source.batch_columns)
    ctx.routes = opts.routes
    ctx.keep_masked = opts.keep_masked
    limit = store_parts.PART_TOKENS
    slots = 1 if lanes is None else 2  # two open parts only when two lanes write them
    tokens = PartWriter(txn.staging, TOKENS, opts.run, S.TOKEN_SCHEMA, limit, lanes, slots)
    seq_schema = S.sequence_schema(source.attributes)
    seqs = PartWriter(txn.staging, SEQUENCES, opts.run, seq_schema, 1 << 62, lanes)
    tally = Tally()
    routing = RoutingWriter(txn.staging, opts.run, tokens, lanes, slots)
    # opened on its first rows: a source without tool responses or token ids has none
    masked = PartWriter(txn.staging, MASKED, opts.run, S.MASKED_SCHEMA, limit, lanes)
    writes = StoreWrites(txn.store.root, STAGING_PARTS)
    try:
        for batch in prefetch(source.batches):
            tok_table, seq_table, part_tally = canonicalize(batch, ctx)
            ctx.seq_base += seq_table.num_rows
            with writes:  # a full disk is the store's, never the input's
                tokens.write(tok_table)
                routing.write(ctx.routing_rows)
                if ctx.masked_rows is not None:
                    masked.write(ctx.masked_rows)
                seqs.write(seq_table)
            tally.add(part_tally)
            progress.tokens(tok_table.num_rows)
        with writes:
            parts = tokens.close() + seqs.close() + routing.close() + masked.close()
    except BaseException:
        if lanes is not None:
            lanes.stop()  # before the open files are closed under a writing thread
        raise
    finally:
        tokens.shutdown()
        seqs.shutdown()
        routing.shutdown()
        masked.shutdown()
    return parts, tally, ctx


def finish_notes(source: Source, label: str, tally: Tally, ctx: Context) -> None:
    """A source that held no sample is an error; the notes its tally and routes add."""
    if tally.sequences + tally.dropped_sequences == 0:
        raise InputError(f"{label} holds no samples", "leave empty dumps out of the inputs.")
    if tally.padding_kept:
        source.notes.append(
            f"{tally.padding_kept:,} trailing positions that look like padding kept as model "
            f"tokens ({ALLOW_FLAG})"
        )
    source.notes.extend(route_notes(ctx))


def _unchanged(path: Path, label: str, content: Content | None) -> int:
    """The size of the file read: one removed meanwhile is a RemovedWhileRead, one changed
    since it was hashed (``content``) a ChangedWhileRead."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        raise removed_while_read(label) from None
    if content is not None and (now.st_size, now.st_mtime_ns) != (content.size, content.mtime_ns):
        raise changed_while_read(label, content.size, now.st_size)
    return content.size if content is not None else now.st_size


def source_record(
    path: str, fp: str, size: int, fmt: str, columns, tags, notes, tally: Tally
) -> SourceRecord:
    return SourceRecord(
        path=path,
        format=fmt,
        size=size,
        fingerprint=fp,
        ingested_at=now(),
        columns=dict(columns),
        tags=dict(tags),
        notes=list(notes),
        sequences=tally.sequences,
        empty_sequences=tally.empty_sequences,
        model_tokens=tally.model_tokens,
        prompt_tokens=tally.prompt_tokens,
        tool_tokens=tally.tool_tokens,
        pad_tokens=tally.pad_tokens,
        dropped_sequences=tally.dropped_sequences,
        dropped=dict(tally.dropped),
        dropped_ids=list(tally.dropped_ids),
        steps=sorted(tally.steps),
        gpus=sorted(tally.gpus),
        attributes=tally.attribute_summary(),
        prompt_lengths=tally.prompt_lengths,
    )
