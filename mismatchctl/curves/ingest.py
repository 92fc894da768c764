"""``ingest-metrics``: a training log (W&B CSV, JSON lines, TensorBoard) into a run's metrics."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc

from mismatchctl.curves.read import MetricsRead, read_metrics
from mismatchctl.curves.series import DUMP_METRICS
from mismatchctl.errors import InputError, UsageError
from mismatchctl.store import Store
from mismatchctl.store.log_metrics import MetricsCommit, MetricSource, commit_metrics


@dataclass
class MetricsIngest:
    run: str
    read: MetricsRead | None  # None when the content was already ingested with these options
    commit: MetricsCommit


def ingest_metrics(
    store: Store,
    path: str | Path,
    run: str,
    *,
    fmt: str | None = None,
    step_column: str | None = None,
    metrics: Sequence[str] = (),
    replace: bool = False,
) -> MetricsIngest:
    """Read one training log and merge it into ``run``'s metrics table (all or nothing)."""
    store.run(run)  # a missing run is an error before reading anything
    source = Path(path)
    if not source.exists():
        raise InputError(f"{source}: no such file or directory", "check the path.")
    read = read_metrics(source, fmt=fmt, step_column=step_column, metrics=metrics)
    _check_names(source, read)
    options = {"format": fmt, "step_column": step_column, "metrics": list(metrics)}
    steps = read.table.column("step")
    record = MetricSource(
        path=str(source),
        format=read.format,
        size=_size(source),
        fingerprint=_fingerprint(source, options),
        step_column=read.step_column,
        options=options,
        renamed=read.renamed,
        notes=read.notes,
        excluded=read.excluded,
        metrics=sorted(pc.unique(read.table.column("metric")).to_pylist()),
        min_step=pc.min(steps).as_py(),
        max_step=pc.max(steps).as_py(),
    )
    commit = commit_metrics(store, run, read.table, record, replace=replace)
    return MetricsIngest(run, read if commit.status == "ingested" else None, commit)


def _check_names(source: Path, read: MetricsRead) -> None:
    names = set(pc.unique(read.table.column("metric")).to_pylist())
    taken = sorted(names & set(DUMP_METRICS))
    if taken:
        raise UsageError(
            f"{source}: metric `{taken[0]}` has the name of a per-step metric mismatchctl derives "
            f"from the dumps ({', '.join(DUMP_METRICS)})",
            f"rename it, e.g. --metric log_{taken[0]}={read.renamed.get(taken[0], taken[0])} "
            "(and list every other metric you want to keep with --metric).",
        )


def _files(source: Path) -> list[Path]:
    if source.is_dir():
        return sorted(p for p in source.rglob("*") if p.is_file())
    return [source]


def _size(source: Path) -> int:
    return sum(p.stat().st_size for p in _files(source))


def _fingerprint(source: Path, options: dict) -> str:
    """sha256 over the content (every file of a directory, with its relative name) and the
    reading options: the same log read the same way is ingested once."""
    h = hashlib.sha256(json.dumps(options, sort_keys=True).encode())
    for p in _files(source):
        h.update(p.relative_to(source).as_posix().encode() if source.is_dir() else b"")
        with p.open("rb") as fh:
            h.update(hashlib.file_digest(fh, "sha256").digest())
    return "sha256:" + h.hexdigest()
