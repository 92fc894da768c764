"""The run catalog: a SQLite file that is the source of truth for which parts belong to which run.

Parts are immutable Parquet files; a run is whatever its committed ``parts`` rows name. Ingest
writes parts first and commits their rows in one transaction, so a crash leaves no half run.
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mismatchctl.errors import StoreError
from mismatchctl.schema import READ_VERSIONS, SCHEMA_VERSION
from mismatchctl.store.location import CATALOG_NAME, demo_store_hint
from mismatchctl.store.writable import not_writable

_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (name TEXT PRIMARY KEY, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources (
    id INTEGER PRIMARY KEY,
    run TEXT NOT NULL REFERENCES runs(name) ON DELETE CASCADE,
    path TEXT NOT NULL, format TEXT NOT NULL, size INTEGER NOT NULL,
    fingerprint TEXT NOT NULL, ingested_at TEXT NOT NULL,
    columns TEXT NOT NULL, tags TEXT NOT NULL, notes TEXT NOT NULL,
    sequences INTEGER NOT NULL, empty_sequences INTEGER NOT NULL,
    model_tokens INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL,
    tool_tokens INTEGER NOT NULL, pad_tokens INTEGER NOT NULL,
    dropped_sequences INTEGER NOT NULL, dropped TEXT NOT NULL, dropped_ids TEXT NOT NULL,
    steps TEXT NOT NULL, gpus TEXT NOT NULL, duplicate_sequences INTEGER,
    attributes TEXT, prompt_lengths INTEGER,
    UNIQUE (run, fingerprint)
);
CREATE TABLE IF NOT EXISTS parts (
    id INTEGER PRIMARY KEY,
    run TEXT NOT NULL REFERENCES runs(name) ON DELETE CASCADE,
    source_id INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
    kind TEXT NOT NULL, path TEXT NOT NULL UNIQUE, rows INTEGER NOT NULL,
    min_step INTEGER, max_step INTEGER, min_seq INTEGER, max_seq INTEGER
);
CREATE INDEX IF NOT EXISTS parts_run ON parts (run, kind);
CREATE TABLE IF NOT EXISTS metric_sources (
    id INTEGER PRIMARY KEY,
    run TEXT NOT NULL REFERENCES runs(name) ON DELETE CASCADE,
    path TEXT NOT NULL, format TEXT NOT NULL, size INTEGER NOT NULL,
    fingerprint TEXT NOT NULL, ingested_at TEXT NOT NULL, step_column TEXT NOT NULL,
    options TEXT NOT NULL, renamed TEXT NOT NULL, notes TEXT NOT NULL, excluded TEXT NOT NULL,
    metrics TEXT NOT NULL, "values" INTEGER NOT NULL, replaced INTEGER NOT NULL,
    min_step INTEGER, max_step INTEGER,
    UNIQUE (run, fingerprint)
);
CREATE TABLE IF NOT EXISTS metric_tables (
    run TEXT PRIMARY KEY REFERENCES runs(name) ON DELETE CASCADE,
    path TEXT NOT NULL UNIQUE, rows INTEGER NOT NULL
);
"""

# the fields a table stores as JSON text (None stays NULL: unknown)
METRIC_JSON_FIELDS = ("options", "renamed", "notes", "excluded", "metrics")
JSON_FIELDS = ("columns", "tags", "notes", "dropped", "dropped_ids", "steps", "gpus", "attributes")


@dataclass
class IngestedFile:
    """A file ingested into a run: where it came from, and the hash that tells it again."""

    path: str
    format: str
    size: int
    fingerprint: str


@dataclass
class SourceRecord(IngestedFile):
    """One ingested file: where it came from and what it contributed (the provenance)."""

    ingested_at: str
    columns: dict[str, str]
    tags: dict[str, str]
    notes: list[str]
    sequences: int
    empty_sequences: int
    model_tokens: int
    prompt_tokens: int
    tool_tokens: int
    pad_tokens: int
    dropped_sequences: int
    dropped: dict[str, int]
    dropped_ids: list[str]
    steps: list[int]
    gpus: list[str]
    # exact repeats of an earlier sequence of the same step (ingest.duplicates); None for a
    # source ingested before they were counted
    duplicate_sequences: int | None = None
    # per attribute: distinct values, whether there were more than were counted, and the most
    # frequent values with their sequence counts; None for a source ingested before attributes
    attributes: dict[str, Any] | None = None
    # sequences whose prompt length is known (None: ingested before prompt lengths were kept)
    prompt_lengths: int | None = None
    id: int | None = None
    run: str = ""


@dataclass
class MetricSource(IngestedFile):
    """One ingested metrics file (or TensorBoard directory): where it came from, what it gave."""

    step_column: str
    options: dict[str, Any]
    renamed: dict[str, str]
    notes: list[str]
    excluded: dict[str, int]
    metrics: list[str] = field(default_factory=list)
    values: int = 0  # values this source holds in the run's table now
    replaced: int = 0  # earlier values of the run that this source replaced
    min_step: int | None = None
    max_step: int | None = None
    ingested_at: str = ""
    id: int | None = None
    run: str = ""


@dataclass
class PartRecord:
    kind: str  # "tokens" | "sequences"
    path: str  # relative to the store root
    rows: int
    min_step: int | None
    max_step: int | None
    min_seq: int | None
    max_seq: int | None
    source_id: int | None = None
    run: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def connect(root: Path, create: bool = False) -> sqlite3.Connection:
    path = root / CATALOG_NAME
    if not path.exists() and not create:
        raise StoreError(
            f"no store at {root} (no {CATALOG_NAME})",
            "ingest something first (mismatchctl ingest ...), or point --store at your store."
            + demo_store_hint(root),
        )
    if create and not path.exists():
        _create(root)
    try:
        con = sqlite3.connect(path, timeout=30, isolation_level=None)
        con.row_factory = sqlite3.Row
        con.execute("PRAGMA foreign_keys = ON")
        if create:
            con.executescript(_DDL)
            con.execute(
                "INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
            _add_columns(con)
        _check_version(con, root)
        if create:  # a writer's new parts may hold the current version's columns
            _upgrade(con)
    except sqlite3.DatabaseError as exc:
        refused = not_writable(root, exc, f"writing its catalog {CATALOG_NAME}")
        if refused is not None:  # a full disk or a read-only store, not a damaged catalog
            raise refused from None
        raise StoreError(
            f"the catalog {path} is not a readable SQLite database ({exc})",
            "point --store at a mismatchctl store, or move the damaged store away.",
        ) from None
    return con


def _create(root: Path) -> None:
    """Build a new catalog beside the store and rename it into place: a reader (or a writer
    killed half-way) never sees a catalog without its tables or its schema version."""
    tmp = root / ".staging" / f"catalog-{uuid.uuid4().hex}.sqlite"  # swept if we are killed
    tmp.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(tmp, isolation_level=None)
    try:
        con.executescript(_DDL)
        con.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    finally:
        con.close()
    os.replace(tmp, root / CATALOG_NAME)


# Columns added to a table after the first stores were written: a writer adds them to an older
# catalog (its rows hold NULL there: unknown), readers take a missing column as unknown.
_ADDED_COLUMNS = {
    "sources": (
        ("duplicate_sequences", "INTEGER"),
        ("attributes", "TEXT"),
        ("prompt_lengths", "INTEGER"),
    )
}


def _add_columns(con: sqlite3.Connection) -> None:
    for table, columns in _ADDED_COLUMNS.items():
        have = {row[1] for row in con.execute(f"PRAGMA table_info({table})")}
        for name, kind in columns:
            if name not in have:
                con.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")


def _check_version(con: sqlite3.Connection, root: Path) -> None:
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    found = int(row[0]) if row else None
    if found not in READ_VERSIONS:
        raise StoreError(
            f"the store {root} has schema version {found}, this mismatchctl reads "
            + " or ".join(str(v) for v in READ_VERSIONS),
            "use the mismatchctl version that wrote the store, or re-ingest into a new store.",
        )


def _upgrade(con: sqlite3.Connection) -> None:
    """An older store a writer opens becomes the current version: its parts lack the new
    nullable columns, which every reader takes as null."""
    con.execute(
        "UPDATE meta SET value = ? WHERE key = 'schema_version' AND value != ?",
        (str(SCHEMA_VERSION), str(SCHEMA_VERSION)),
    )


def insert_source(con: sqlite3.Connection, run: str, rec: SourceRecord) -> int:
    return _insert(con, "sources", run, rec, JSON_FIELDS)


def _insert(
    con: sqlite3.Connection, table: str, run: str, rec: IngestedFile, json_fields: tuple[str, ...]
) -> int:
    """Insert a record as a row of ``table`` under ``run``; the row's id (the insert gives it)."""
    values = {k: v for k, v in rec.__dict__.items() if k not in ("id", "run")}
    for key in json_fields:
        if values[key] is not None:
            values[key] = json.dumps(values[key], sort_keys=True)
    cols = ", ".join(f'"{k}"' for k in ["run", *values])  # quoted: `values` is an SQL keyword
    marks = ", ".join("?" * (len(values) + 1))
    cur = con.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", [run, *values.values()])
    return int(cur.lastrowid or 0)


def insert_part(con: sqlite3.Connection, run: str, source_id: int, part: PartRecord) -> None:
    con.execute(
        "INSERT INTO parts (run, source_id, kind, path, rows, min_step, max_step, min_seq, "
        "max_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run,
            source_id,
            part.kind,
            part.path,
            part.rows,
            part.min_step,
            part.max_step,
            part.min_seq,
            part.max_seq,
        ),
    )


def source_from_row(row: sqlite3.Row) -> SourceRecord:
    return SourceRecord(**_decoded(row, JSON_FIELDS))


def _decoded(row: sqlite3.Row, json_fields: tuple[str, ...]) -> dict[str, Any]:
    """A row's values by column, its JSON columns parsed (NULL stays None)."""
    data = dict(row)
    for key in json_fields:
        if data.get(key) is not None:
            data[key] = json.loads(data[key])
    return data


def part_from_row(row: sqlite3.Row) -> PartRecord:
    data = dict(row)
    data.pop("id")
    return PartRecord(**data)


def insert_metric_source(con: sqlite3.Connection, run: str, src: MetricSource) -> int:
    return _insert(con, "metric_sources", run, src, METRIC_JSON_FIELDS)


def metric_source_from_row(row: sqlite3.Row) -> MetricSource:
    return MetricSource(**_decoded(row, METRIC_JSON_FIELDS))
