"""Training-log metrics of a run: one Parquet file per run plus their provenance in the catalog.

A run's metrics are small (steps x metric names), so each ``ingest-metrics`` rewrites the run's
whole table into a new file and swaps it in with one catalog transaction: a crash leaves either the
old table or the new one (the other file is an orphan that the next write sweeps away).

Rows are ``(step, metric, value, source_id)``, one per (step, metric). Values that an input brings
again unchanged are counted as already present; a different value for the same (step, metric) is a
conflict: refused, or with ``replace`` every earlier value of the metrics the input brings is
replaced.
"""

from __future__ import annotations

import sqlite3
import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl.columns import arrow_of, numpy_of
from mismatchctl.errors import StoreError
from mismatchctl.store.catalog import (
    MetricSource,
    connect,
    insert_metric_source,
    metric_source_from_row,
)
from mismatchctl.store.lock import write_lock
from mismatchctl.store.parts import COMPRESSION, METRICS, part_dir
from mismatchctl.store.store import Store, now
from mismatchctl.store.writable import StoreWrites

STEP, METRIC, VALUE, SOURCE_ID = "step", "metric", "value", "source_id"
METRIC_SCHEMA = pa.schema(
    [
        pa.field(STEP, pa.int64(), nullable=False),
        pa.field(METRIC, pa.string(), nullable=False),
        pa.field(VALUE, pa.float64(), nullable=False),
        pa.field(SOURCE_ID, pa.int64(), nullable=False),
    ]
)
CONFLICT_EXAMPLES = 5


@dataclass
class MetricsCommit:
    """What an ``ingest-metrics`` did to the run's table."""

    status: str  # "ingested" | "already ingested"
    source: MetricSource
    added: int = 0  # new (step, metric) values
    unchanged: int = 0  # values the run already had, equal
    replaced: int = 0  # earlier values replaced (``replace=True``)
    same_as: MetricSource | None = None


def metric_table_row(store: Store, run: str) -> sqlite3.Row | None:
    """The catalog row (``path``, ``rows``) of the run's metrics file, None when it has none."""
    con = connect(store.root)
    try:
        return con.execute("SELECT path, rows FROM metric_tables WHERE run = ?", (run,)).fetchone()
    finally:
        con.close()


def read_metrics_table(store: Store, run: str) -> pa.Table:
    """The run's metric rows (``METRIC_SCHEMA``), empty when it has none."""
    row = metric_table_row(store, run)
    if row is None:
        return pa.Table.from_batches([], METRIC_SCHEMA)  # empty_table() imports pandas
    path = store.location(row["path"])
    try:
        table = pq.read_table(path, schema=METRIC_SCHEMA)
    except (OSError, pa.ArrowException) as exc:
        raise StoreError(
            f"the metrics file {row['path']} of run `{run}` is missing or unreadable ({exc})",
            f"ingest the training logs again: `mismatchctl ingest-metrics FILE --run {run} "
            "--replace`.",
        ) from None
    if table.num_rows != row["rows"]:
        raise StoreError(
            f"the metrics file {row['path']} of run `{run}` holds {table.num_rows} rows, the "
            f"catalog says {row['rows']}",
            f"ingest the training logs again: `mismatchctl ingest-metrics FILE --run {run} "
            "--replace`.",
        )
    return table


def commit_metrics(
    store: Store, run: str, new: pa.Table, source: MetricSource, *, replace: bool = False
) -> MetricsCommit:
    """Merge ``new`` (``step, metric, value``) into the run's table, all or nothing."""
    store.run(run)  # the run must exist: names a missing run with the runs there are
    with write_lock(store.root), StoreWrites(store.root, f"writing the metrics of run `{run}`"):
        store.sweep()
        known = _known(store, run, source.fingerprint)
        if known is not None:
            return MetricsCommit("already ingested", source, same_as=known)
        old = read_metrics_table(store, run)
        merged = _merge(run, old, new, source, replace)
        return _swap(store, run, merged, source)


@dataclass
class _Merged:
    keep: pa.Table  # earlier rows kept
    add: pa.Table  # the new rows, without those already present unchanged
    unchanged: int
    replaced: int


def _merge(run: str, old: pa.Table, new: pa.Table, src: MetricSource, replace: bool) -> _Merged:
    import pyarrow.compute as pc  # here only: the store's readers start without it

    new_names = pc.unique(new.column(METRIC))
    if replace:
        drop = pc.is_in(old.column(METRIC), value_set=new_names)
        replaced = int(pc.sum(drop).as_py() or 0)
        return _Merged(old.filter(pc.invert(drop)), new, 0, replaced)
    old_index = {
        (s, m): v
        for s, m, v in zip(
            old.column(STEP).to_pylist(),
            old.column(METRIC).to_pylist(),
            old.column(VALUE).to_pylist(),
            strict=True,
        )
    }
    present = np.zeros(new.num_rows, dtype=bool)
    conflicts: list[str] = []
    n_conflicts = 0
    columns = zip(
        new.column(STEP).to_pylist(),
        new.column(METRIC).to_pylist(),
        new.column(VALUE).to_pylist(),
        strict=True,
    )
    for i, (step, metric, value) in enumerate(columns):
        before = old_index.get((step, metric))
        if before is None:
            continue
        if _same(before, value):
            present[i] = True
            continue
        n_conflicts += 1
        if len(conflicts) < CONFLICT_EXAMPLES:
            conflicts.append(f"`{metric}` at step {step}: {before!r} in the run, {value!r} here")
    if n_conflicts:
        raise StoreError(
            f"{src.path}: {n_conflicts} value(s) differ from values run `{run}` already has for "
            f"the same step and metric: " + "; ".join(conflicts),
            "pass --replace to replace the run's values of the metrics this file brings, or "
            "keep both under other names with --metric NEW=SOURCE.",
        )
    return _Merged(old, new.filter(arrow_of(~present)), int(present.sum()), 0)


def _same(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)


def _swap(store: Store, run: str, merged: _Merged, src: MetricSource) -> MetricsCommit:
    con = connect(store.root)
    target = None
    try:
        con.execute("BEGIN IMMEDIATE")
        src.values = merged.add.num_rows
        src.replaced = merged.replaced
        src.ingested_at = now()
        source_id = insert_metric_source(con, run, src)
        src.id, src.run = source_id, run
        ids = arrow_of(np.full(merged.add.num_rows, source_id, dtype=np.int64))
        added = merged.add.select([STEP, METRIC, VALUE]).append_column(SOURCE_ID, ids)
        table = pa.concat_tables([merged.keep, added.cast(METRIC_SCHEMA)])
        table = table.sort_by([(METRIC, "ascending"), (STEP, "ascending")])
        rel = f"{part_dir(METRICS, run)}/metrics-{uuid.uuid4().hex[:12]}.parquet"
        target = store.root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, target, compression=COMPRESSION)
        con.execute("DELETE FROM metric_tables WHERE run = ?", (run,))
        con.execute("INSERT INTO metric_tables VALUES (?, ?, ?)", (run, rel, table.num_rows))
        _refresh_counts(con, run, table)
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        if target is not None:
            target.unlink(missing_ok=True)
        raise
    finally:
        con.close()
    store.sweep()
    store.publish()
    return MetricsCommit("ingested", src, merged.add.num_rows, merged.unchanged, merged.replaced)


def _refresh_counts(con: sqlite3.Connection, run: str, table: pa.Table) -> None:
    """Each source's count of values still in the table; sources left with none are removed."""
    ids, counts = np.unique(numpy_of(table.column(SOURCE_ID)), return_counts=True)
    held = dict(zip(ids.tolist(), counts.tolist(), strict=True))
    for (sid,) in con.execute("SELECT id FROM metric_sources WHERE run = ?", (run,)).fetchall():
        if sid in held:
            con.execute('UPDATE metric_sources SET "values" = ? WHERE id = ?', (held[sid], sid))
        else:
            con.execute("DELETE FROM metric_sources WHERE id = ?", (sid,))


def _known(store: Store, run: str, fingerprint: str) -> MetricSource | None:
    con = connect(store.root)
    try:
        row = con.execute(
            "SELECT * FROM metric_sources WHERE run = ? AND fingerprint = ?", (run, fingerprint)
        ).fetchone()
        return metric_source_from_row(row) if row else None
    finally:
        con.close()


__all__ = [
    "METRIC_SCHEMA",
    "MetricSource",
    "MetricsCommit",
    "commit_metrics",
    "read_metrics_table",
]
