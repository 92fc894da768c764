"""The Ray engine: the local engine's ``part_groups`` run per token part as Ray tasks, and the
mergeable partials merged in the driver exactly as the local engine merges them.

No metric is implemented here: a task is ``part_groups`` (the same function the local thread pool
maps), and the driver folds the results with ``engines.local.fold`` and each extra's ``merge``, in the
order of the tasks (not of their completion), so that a report is the same whichever task ends
first. Every worker must see the store's part files under the same paths as the driver (a
shared filesystem); paths are made absolute before they are shipped.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mismatchctl.allocator import keep_freed_memory
from mismatchctl.engines.local import Folded, Groups, PartExtra, Read, fold_reads, part_groups
from mismatchctl.engines.plan import DEFAULT_BINNING, Binning, PartTask, Pass, RowFilter
from mismatchctl.errors import MismatchError
from mismatchctl.parallel import DEFAULT_WORKERS, Failure, connect, ordered, remote

Shared = tuple[list[Pass], np.ndarray, RowFilter | None, list[PartExtra], Binning]


def fold_part(task: PartTask, shared: Shared) -> tuple[list[Groups], list[Any]] | Failure:
    """The body of one Ray task: one part's groups and extra states (``part_groups``)."""
    passes, edges, rows, extras, binning = shared
    keep_freed_memory()  # once per worker process
    try:
        return part_groups(task, passes, edges, rows, extras, binning)
    except MismatchError as exc:
        return Failure(exc)


def run_passes_ray(
    tasks: list[PartTask],
    passes: list[Pass],
    edges: np.ndarray,
    rows: RowFilter | None = None,
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    extras: Sequence[PartExtra] = (),
    binning: Binning = DEFAULT_BINNING,
    *,
    address: str | None = None,
) -> Folded:
    """``run_passes`` of the local engine, with one Ray task per part. ``workers`` is the CPU
    count of a local Ray started here; on a cluster (``address``, ``$RAY_ADDRESS`` or an earlier
    ``ray.init``) the cluster's CPUs run the tasks."""
    read = Read(tasks, passes, edges, rows, extras, binning)
    return run_reads_ray([read], workers, on_part, address=address)[0]


def run_reads_ray(
    reads: Sequence[Read],
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    on_read: Callable[[int, Folded], None] | None = None,
    *,
    address: str | None = None,
) -> list[Folded]:
    """``run_reads`` of the local engine: the tasks of every read submitted at once, each read
    folded on its own in task order."""
    ray = connect(address, workers)
    fold_task = remote(fold_part)
    refs = []
    for r in reads:
        if not r.tasks:
            continue
        # stored once per read, read by every task of it
        shared = ray.put((list(r.passes), r.edges, r.rows, list(r.extras), r.binning))
        refs += [fold_task.remote(_absolute(task), shared) for task in r.tasks]
    rows = [task.rows for r in reads for task in r.tasks]

    def done(i: int, _: Any) -> None:
        if on_part:
            on_part(rows[i])

    return fold_reads(reads, ordered(ray, refs, done), on_read=on_read)


def _absolute(task: PartTask) -> PartTask:
    """The task with absolute local paths (a URI of a store in a bucket is left as it is)."""

    def absolute(path: str) -> str:
        return path if "://" in path else os.path.abspath(path)

    return dataclasses.replace(
        task,
        path=absolute(task.path),
        sequences=tuple(absolute(p) for p in task.sequences),
        routing=absolute(task.routing) if task.routing else "",
    )
