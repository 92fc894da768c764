"""The verbs the CLI calls. They return objects; they never print and never exit."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from mismatchctl.analysis.report import Report, build_report
from mismatchctl.analysis.selection import parse_steps
from mismatchctl.analysis.splits import parse_by
from mismatchctl.engines.local import DEFAULT_WORKERS
from mismatchctl.ingest.columns import parse_mapping
from mismatchctl.ingest.run_ingest import IngestResult, Options, Progress, ingest_files, parse_tags
from mismatchctl.store import RunInfo, Store, open_store

StorePath = str | os.PathLike[str] | None


def ingest(
    inputs: Iterable[str | Path],
    run: str,
    *,
    tags: Iterable[str] | Mapping[str, str] = (),
    fmt: str | None = None,
    mapping: Iterable[str] | Mapping[str, str] = (),
    skip_bad: bool = False,
    store: StorePath = None,
    progress: Progress | None = None,
) -> IngestResult:
    """Read dump files into ``run`` of the store: all of them, or nothing on any error."""
    tag_map = dict(tags) if isinstance(tags, Mapping) else parse_tags(tags)
    col_map = dict(mapping) if isinstance(mapping, Mapping) else parse_mapping(mapping)
    opts = Options(run=run, tags=tag_map, fmt=fmt, mapping=col_map, skip_bad=skip_bad)
    return ingest_files(open_store(store), [str(i) for i in inputs], opts, progress)


def runs(store: StorePath = None) -> list[RunInfo]:
    return open_store(store).runs()


def run_info(name: str, store: StorePath = None) -> RunInfo:
    return open_store(store).run(name)


def remove_run(name: str, store: StorePath = None) -> RunInfo:
    return open_store(store).remove(name)


def report(
    runs: Iterable[str] | None = None,
    *,
    bins: str = "log",
    by: Iterable[str] = (),
    by_gpu: bool = False,
    steps: str | None = None,
    workers: int = DEFAULT_WORKERS,
    store: StorePath = None,
    on_part: Callable[[int], None] | None = None,
) -> Report:
    """Every metric of the selected runs (all runs when none is named), grouped by the default
    splits plus each ``by`` split (``"step"``, ``"step,turn_kind"``, ``"tag:engine"``...)."""
    return build_report(
        open_store(store),
        list(runs or []),
        bins=bins,
        by=parse_by(list(by)),
        by_gpu=by_gpu,
        steps=parse_steps(steps),
        workers=workers,
        on_part=on_part,
    )


__all__ = ["Report", "Store", "ingest", "open_store", "remove_run", "report", "run_info", "runs"]
