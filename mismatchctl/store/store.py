"""The store: immutable Parquet parts plus the SQLite catalog that says which parts form a run.

Layout (documented in docs/store.md so DuckDB, Polars or Spark can read it directly)::

    <store>/catalog.sqlite                        runs, sources (provenance), parts
    <store>/tokens/run=<name>/part-*.parquet      canonical token rows (model tokens only)
    <store>/sequences/run=<name>/part-*.parquet   one row per sequence, empty ones included
    <store>/metrics/run=<name>/metrics-*.parquet  the run's training-log metrics (one file per run)
    <store>/.staging/<id>/...                     parts of an ingest not yet committed
    <store>/.lock                                 held by the one writer at a time
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from mismatchctl import schema as S
from mismatchctl.display import did_you_mean, shown
from mismatchctl.errors import StoreError, UsageError
from mismatchctl.store import catalog
from mismatchctl.store.catalog import MetricSource, PartRecord, SourceRecord
from mismatchctl.store.location import demo_store_hint
from mismatchctl.store.lock import LOCK_NAME, write_lock
from mismatchctl.store.parts import MASKED, METRICS, ROUTING, SEQUENCES, TOKENS
from mismatchctl.store.writable import StoreWrites

if TYPE_CHECKING:
    import polars as pl

RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+\-]{0,127}$")
STAGING = ".staging"


def check_run_name(name: str) -> str:
    """A run name is a directory name in the store: no path, no control character, no `=`."""
    if not RUN_NAME.fullmatch(name):  # fullmatch: `$` would accept a trailing newline
        raise UsageError(
            f"run name `{shown(name, 80)}` is not allowed",
            "use letters, digits, `.`, `_`, `+` and `-` (no spaces, `=`, `,`, `@` or `/`), "
            "starting with a letter or digit, at most 128 characters.",
        )
    return name


def now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass
class RunInfo:
    """A run as the catalog describes it (tags merged over its sources)."""

    name: str
    created_at: str
    tags: dict[str, str]
    steps: list[int]
    gpus: list[str]
    sequences: int
    empty_sequences: int
    model_tokens: int
    tool_tokens: int
    dropped_sequences: int
    ingested_at: str
    sources: list[SourceRecord] = field(default_factory=list)
    metric_sources: list[MetricSource] = field(default_factory=list)  # training logs


class Store:
    """A mismatchctl store at ``root``. Reading needs no lock; every write takes the store lock."""

    publishes = False  # a store in a bucket publishes its writes (``store/remote.py``)

    def __init__(self, root: Path) -> None:
        self.root = root
        # the sources read so far, by (id, fingerprint, ingest time): a source row does not
        # change once committed (a replaced source is another row, even with its id), so a
        # watched run of a thousand files is not parsed again at every new step
        self._sources: dict[tuple[int, str, str], SourceRecord] = {}

    def __str__(self) -> str:
        return str(self.root)

    def exists(self) -> bool:
        return (self.root / catalog.CATALOG_NAME).exists()

    def _connect(self) -> sqlite3.Connection:
        return catalog.connect(self.root)

    # --- reading ------------------------------------------------------------------------
    def run_names(self) -> list[str]:
        if not self.exists():
            return []
        con = self._connect()
        try:
            return [r[0] for r in con.execute("SELECT name FROM runs ORDER BY name")]
        finally:
            con.close()

    def runs(self) -> list[RunInfo]:
        """Every run (one removed between the listing and its reading is left out)."""
        out = []
        for name in self.run_names():
            try:
                out.append(self.run(name))
            except StoreError:
                if name in self.run_names():
                    raise
        return out

    def run(self, name: str) -> RunInfo:
        con = self._connect()
        try:
            row = con.execute("SELECT * FROM runs WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise self._unknown_run(name, con)
            sources = self._run_sources(con, name)
            rows = con.execute("SELECT * FROM metric_sources WHERE run = ? ORDER BY id", (name,))
            metric_sources = [catalog.metric_source_from_row(r) for r in rows]
        finally:
            con.close()
        info = _run_info(name, row["created_at"], sources)
        info.metric_sources = metric_sources
        return info

    def _run_sources(self, con: sqlite3.Connection, name: str) -> list[SourceRecord]:
        """The run's sources: the rows read before taken from the cache, the others parsed
        (their JSON fields are most of a source's reading)."""
        out = []
        for row in con.execute("SELECT * FROM sources WHERE run = ? ORDER BY id", (name,)):
            key = (row["id"], row["fingerprint"], row["ingested_at"])
            found = self._sources.get(key)
            if found is None:
                found = self._sources[key] = catalog.source_from_row(row)
            out.append(found)
        return out

    def parts(self, run: str, kind: str = TOKENS) -> list[PartRecord]:
        con = self._connect()
        try:
            if con.execute("SELECT 1 FROM runs WHERE name = ?", (run,)).fetchone() is None:
                raise self._unknown_run(run, con)
            rows = con.execute(
                "SELECT * FROM parts WHERE run = ? AND kind = ? ORDER BY min_seq", (run, kind)
            )
            return [catalog.part_from_row(r) for r in rows]
        finally:
            con.close()

    def part_path(self, part: PartRecord) -> Path:
        return self.location(part.path)

    def location(self, rel: str) -> Path:
        """Where a file of the store is, given its path relative to the store."""
        return self.root / rel

    def has_file(self, rel: str) -> bool:
        return self.location(rel).is_file()

    def publish(self) -> None:
        """Make a committed write visible: nothing to do for a store on a filesystem (the catalog
        commit did it); a store in a bucket uploads (``store/remote.py``)."""

    def scan(self, run: str | None = None, kind: str = TOKENS) -> pl.LazyFrame:
        """Canonical rows of one run (or of every run) as a Polars LazyFrame with a ``run`` column."""
        import polars as pl  # only here: the commands never need it, and it is slow to import

        names = [run] if run is not None else self.run_names()
        frames = []
        for name in names:
            paths = [str(self.part_path(p)) for p in self.parts(name, kind)]
            schema = {TOKENS: S.TOKEN_SCHEMA, MASKED: S.MASKED_SCHEMA}.get(kind, S.SEQUENCE_SCHEMA)
            if not paths:
                frame = pl.LazyFrame(schema=pl.Schema(pl.from_arrow(schema.empty_table()).schema))
            else:  # sources differ in their attribute columns; older parts lack later columns
                frame = pl.concat([pl.scan_parquet(p) for p in paths], how="diagonal_relaxed")
            if kind == TOKENS and S.TOKEN_ENTROPY not in frame.collect_schema().names():
                frame = frame.with_columns(pl.lit(None, pl.Float64).alias(S.TOKEN_ENTROPY))
            frames.append(
                frame.with_columns(pl.lit(name).alias(S.RUN)).select(S.RUN, pl.all().exclude(S.RUN))
            )
        if not frames:
            empty = pl.from_arrow(S.TOKEN_SCHEMA.empty_table()).lazy()
            return empty.with_columns(pl.lit(None, pl.String).alias(S.RUN))
        return pl.concat(frames, how="diagonal_relaxed")

    def _unknown_run(self, name: str, con: sqlite3.Connection) -> StoreError:
        known = [r[0] for r in con.execute("SELECT name FROM runs ORDER BY name")]
        return StoreError(
            f"no run `{shown(name, 80)}` in the store {self} (runs: {', '.join(known) or 'none'})",
            did_you_mean(name, known)
            + "list the runs with `mismatchctl runs`."
            + demo_store_hint(str(self)),
        )

    # --- writing ------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """Stage parts, then commit them all (or nothing). Creates the store when missing;
        a failed first write removes the store again."""
        created = not self.root.exists()
        if not created and self.root.is_file():
            raise StoreError(
                f"the store path {self.root} is a file", "point --store at a directory."
            )
        with StoreWrites(self.root, "creating its directory"):
            self.root.mkdir(parents=True, exist_ok=True)
        try:
            with write_lock(self.root):
                with StoreWrites(self.root, "preparing the staging directory"):
                    self.sweep()
                    staging = self.root / STAGING / uuid.uuid4().hex
                    staging.mkdir(parents=True)
                txn = Transaction(self, staging)
                try:
                    yield txn
                finally:
                    shutil.rmtree(staging, ignore_errors=True)
                    _rmdir_if_empty(self.root / STAGING)
        except BaseException:
            if created and not self.exists():
                shutil.rmtree(self.root, ignore_errors=True)
            raise

    def remove(self, run: str) -> RunInfo:
        """Delete a run: its catalog rows in one transaction, then its part files."""
        info = self.run(run)
        with write_lock(self.root), StoreWrites(self.root, f"removing run `{run}`"):
            con = self._connect()
            try:
                con.execute("BEGIN IMMEDIATE")
                con.execute("DELETE FROM runs WHERE name = ?", (run,))
                con.execute("COMMIT")
            finally:
                con.close()
            self.sweep()
        return info

    def known_files(self) -> set[str]:
        """The paths (relative to the store) of every file the catalog refers to."""
        con = self._connect()
        try:
            known = {r[0] for r in con.execute("SELECT path FROM parts")}
            known |= {r[0] for r in con.execute("SELECT path FROM metric_tables")}
        finally:
            con.close()
        return known

    def sweep(self) -> None:
        """Remove what no committed run refers to: stale staging dirs and orphan parts left by a
        writer that was killed. Call with the write lock held."""
        shutil.rmtree(self.root / STAGING, ignore_errors=True)
        if not self.exists():
            return
        known = self.known_files()
        for kind in (TOKENS, SEQUENCES, METRICS, ROUTING, MASKED):
            base = self.root / kind
            if not base.is_dir():
                continue
            for path in base.rglob("*.parquet"):
                if path.relative_to(self.root).as_posix() not in known:
                    path.unlink()
            for run_dir in base.iterdir():
                _rmdir_if_empty(run_dir)


class Transaction:
    """An ingest in progress: what is staged becomes visible only at :meth:`commit`."""

    def __init__(self, store: Store, staging: Path) -> None:
        self.store, self.staging = store, staging

    def known_fingerprint(self, run: str, fingerprint: str) -> SourceRecord | None:
        row = self._source_row("*", "fingerprint", run, fingerprint)
        return catalog.source_from_row(row) if row else None

    def has_size(self, run: str, size: int) -> bool:
        """Whether a source of ``run`` has ``size`` bytes (one of another size cannot have the
        same content)."""
        return self._source_row("1", "size", run, size) is not None

    def _source_row(self, what: str, field: str, run: str, value: object) -> sqlite3.Row | None:
        """The first source row of ``run`` whose ``field`` is ``value`` (``what`` of it), or None
        (also when the store is not made yet)."""
        if not self.store.exists():
            return None
        con = self.store._connect()
        try:
            sql = f"SELECT {what} FROM sources WHERE run = ? AND {field} = ? LIMIT 1"
            return con.execute(sql, (run, value)).fetchone()
        finally:
            con.close()

    def next_seq(self, run: str) -> int:
        if not self.store.exists():
            return 0
        con = self.store._connect()
        try:
            row = con.execute(
                "SELECT MAX(max_seq) FROM parts WHERE run = ? AND kind = ?", (run, SEQUENCES)
            ).fetchone()
            return 0 if row[0] is None else int(row[0]) + 1
        finally:
            con.close()

    def commit(
        self,
        run: str,
        sources: list[tuple[SourceRecord, list[PartRecord]]],
        replacing: int | None = None,
    ) -> None:
        """Move staged parts into place, then record them in one catalog transaction; with
        ``replacing``, that source of the run (and its parts) leaves the run in the same
        transaction: a reader sees the old source or the new one, never both nor neither (its
        files are left to the next write's sweep, a reader may still hold them)."""
        with StoreWrites(self.store.root, "committing the ingest"):
            self._commit(run, sources, replacing)

    def _commit(
        self,
        run: str,
        sources: list[tuple[SourceRecord, list[PartRecord]]],
        replacing: int | None,
    ) -> None:
        moved: list[Path] = []
        con = catalog.connect(self.store.root, create=True)
        try:
            for _, parts in sources:
                for part in parts:
                    target = self.store.root / part.path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(self.staging / part.path, target)
                    moved.append(target)
            con.execute("BEGIN IMMEDIATE")
            con.execute("INSERT OR IGNORE INTO runs VALUES (?, ?)", (run, now()))
            if replacing is not None:  # its parts' rows go with it (ON DELETE CASCADE)
                con.execute("DELETE FROM sources WHERE id = ? AND run = ?", (replacing, run))
            for record, parts in sources:
                source_id = catalog.insert_source(con, run, record)
                for part in parts:
                    catalog.insert_part(con, run, source_id, part)
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            for path in moved:
                path.unlink(missing_ok=True)
            raise
        finally:
            con.close()


def _rmdir_if_empty(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()


def _run_info(name: str, created_at: str, sources: list[SourceRecord]) -> RunInfo:
    tags: dict[str, list[str]] = {}
    for src in sources:
        for key, value in src.tags.items():
            tags.setdefault(key, [])
            if value not in tags[key]:
                tags[key].append(value)
    return RunInfo(
        name=name,
        created_at=created_at,
        tags={k: ",".join(v) for k, v in sorted(tags.items())},
        steps=sorted({s for src in sources for s in src.steps}),
        gpus=sorted({g for src in sources for g in src.gpus}),
        sequences=sum(s.sequences for s in sources),
        empty_sequences=sum(s.empty_sequences for s in sources),
        model_tokens=sum(s.model_tokens for s in sources),
        tool_tokens=sum(s.tool_tokens for s in sources),
        dropped_sequences=sum(s.dropped_sequences for s in sources),
        ingested_at=max((s.ingested_at for s in sources), default=created_at),
        sources=sources,
    )


__all__ = ["LOCK_NAME", "RunInfo", "Store", "Transaction", "check_run_name"]
