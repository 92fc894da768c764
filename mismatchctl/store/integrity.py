"""Checking that the parts the catalog lists are on disk, whole, and hold the rows it says.

The catalog records each part's row count. A part that was deleted, truncated (its Parquet footer
is at the end, so a cut file has none) or replaced by other data is found by reading its footer,
which costs one small read per part; ``deep`` also decodes every page and verifies its CRC
(parts are written with page checksums).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl.errors import StoreError
from mismatchctl.store.catalog import PartRecord
from mismatchctl.store.log_metrics import metric_table_row
from mismatchctl.store.parts import MASKED, METRICS, ROUTING, SEQUENCES, TOKENS
from mismatchctl.store.store import Store


@dataclass
class Damage:
    run: str
    part: str  # path relative to the store root
    problem: str


def part_problem(store: Store, part: PartRecord, deep: bool = False) -> str | None:
    """What is wrong with one part, or None when it is whole."""
    path = store.part_path(part)
    if not store.has_file(part.path):
        return f"is missing (expected {part.rows:,} rows)"
    try:
        rows = pq.ParquetFile(path).metadata.num_rows
        if deep:
            rows = pq.read_table(path, page_checksum_verification=True).num_rows
    except (OSError, pa.ArrowException) as exc:
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return f"is truncated or corrupt ({first}; expected {part.rows:,} rows)"
    if rows != part.rows:
        return f"holds {rows:,} rows, the catalog expects {part.rows:,}"
    return None


def run_damage(store: Store, run: str, deep: bool = False) -> list[Damage]:
    parts = [
        part for kind in (TOKENS, SEQUENCES, ROUTING, MASKED) for part in store.parts(run, kind)
    ]
    return parts_damage(store, run, parts, deep)


def parts_damage(
    store: Store, run: str, parts: list[PartRecord], deep: bool = False
) -> list[Damage]:
    """The damage of some of the run's parts, and of its training-log metrics file."""
    metrics = metrics_part(store, run)
    return [
        Damage(run, part.path, problem)
        for part in [*parts, *([metrics] if metrics else [])]
        if (problem := part_problem(store, part, deep)) is not None
    ]


def metrics_part(store: Store, run: str) -> PartRecord | None:
    """The run's training-log metrics file as a part (None when it has none)."""
    row = metric_table_row(store, run)
    if row is None:
        return None
    return PartRecord(METRICS, row["path"], row["rows"], None, None, None, None, run=run)


def damage_error(damage: list[Damage]) -> StoreError:
    first = damage[0]
    more = f" ({len(damage) - 1} more damaged part(s))" if len(damage) > 1 else ""
    hint = repair_hint(first.run)
    if first.part.startswith(f"{METRICS}/"):
        hint = (
            f"ingest the run's training logs again: `mismatchctl ingest-metrics FILE --run "
            f"{first.run} --replace` (`mismatchctl runs show {first.run}` lists them)."
        )
    return StoreError(f"part {first.part} of run `{first.run}` {first.problem}{more}", hint)


def repair_hint(run: str) -> str:
    return (
        f"re-ingest the run: `mismatchctl runs rm {run}`, then ingest its sources again "
        f"(`mismatchctl runs show {run}` lists them); `mismatchctl runs check` checks every run."
    )


def check_run(store: Store, run: str) -> None:
    """Raise a StoreError naming the first damaged part of ``run``, and the fix."""
    damage = run_damage(store, run)
    if damage:
        raise damage_error(damage)


def check_parts(store: Store, run: str, parts: list[PartRecord]) -> None:
    """:func:`check_run` of the parts a selection reads (and the run's metrics file)."""
    damage = parts_damage(store, run, parts)
    if damage:
        raise damage_error(damage)


def read_error(run: str, path: str, exc: Exception) -> StoreError:
    """A part that could not be read while a report ran (e.g. removed since it was checked)."""
    first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    return StoreError(f"cannot read part {path} of run `{run}`: {first}", repair_hint(run))
