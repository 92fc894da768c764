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
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from mismatchctl.allocator import keep_freed_memory
from mismatchctl.engines import part_cache, part_lookup
from mismatchctl.engines.local import (
    Folded,
    Groups,
    PartExtra,
    Read,
    fold_reads,
    part_groups,
    read_pieces,
)
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
    folded on its own in task order. The driver finds which parts the part cache holds every
    piece of (by their entries' presence: no state is loaded before its turn in the fold, so
    memory follows the parts in flight), submits a task for each of the others (computing only
    the pieces they lack), and keeps what the workers return."""
    plan: list[tuple[Read, list[bytes | None], PartTask, bool]] = []
    for r in reads:
        digests = read_pieces(r)
        for task in r.tasks:
            plan.append((r, digests, task, part_lookup.all_kept(r, digests, task)))
            if plan[-1][3] and on_part:
                on_part(task.rows)
    missing = [(r, part_lookup.look_up(r, d, task)) for r, d, task, kept in plan if not kept]
    computed = _submitted(missing, workers, address, on_part) if missing else iter(())
    try:
        return fold_reads(reads, _with_cached(plan, missing, computed), on_read=on_read)
    finally:
        part_cache.evict_if_written()


def _submitted(
    items: list[tuple[Read, part_lookup.Lookup]],
    workers: int,
    address: str | None,
    on_part: Callable[[int], None] | None,
) -> Iterator[Folded]:
    """The results of one Ray task per part (its missing pieces), in the order given;
    ``on_part`` as each ends."""
    ray = connect(address, workers)
    fold_task = remote(fold_part)
    shared: dict[tuple[int, int, tuple[int, ...]], Any] = {}
    refs = []
    for r, found in items:
        work = part_lookup.missing(r, found)
        # stored once per read and set of missing pieces, read by every task of it
        which = (id(r), len(work.passes), tuple(id(e) for e in work.extras))
        if which not in shared:
            shared[which] = ray.put((work.passes, r.edges, r.rows, work.extras, r.binning))
        refs.append(fold_task.remote(_absolute(found.task), shared[which]))

    def done(i: int, _: Any) -> None:
        if on_part:
            on_part(items[i][1].task.rows)

    return ordered(ray, refs, done)


def _with_cached(
    plan: list[tuple[Read, list[bytes | None], PartTask, bool]],
    missing: list[tuple[Read, part_lookup.Lookup]],
    computed: Iterator[Folded],
) -> Iterator[Folded]:
    """Every part's result in task order: a kept part's pieces loaded as its turn comes (one
    that no longer reads back whole, or no longer fits, is computed here after all), the
    others as the workers return them, each kept in the cache before the fold merges into it."""
    submitted = iter(missing)
    for r, digests, task, kept in plan:
        if not kept:
            _, found = next(submitted)
            yield part_lookup.assemble(r, found, next(computed))
            continue
        found = part_lookup.look_up(r, digests, task)
        if found.complete:
            yield part_lookup.assemble(r, found, None)
            continue
        work = part_lookup.missing(r, found)
        out = part_groups(task, work.passes, r.edges, r.rows, work.extras, r.binning)
        yield part_lookup.assemble(r, found, out)


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
