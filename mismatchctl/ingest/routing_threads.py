"""The routing kernels over ranges of rows on threads of their own: the compiled loops release
the GIL, so a batch's rows cut in contiguous ranges are checked and compared on several cores
at once, and the results put together are those of one pass over all rows (the first bad row
is the first range's that has one)."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mismatchctl.parallel import DEFAULT_WORKERS

# rows of a range: fewer rows are one range (a thread's hand-off costs about as much as
# checking a few thousand rows)
MIN_ROWS = 8192

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def threads() -> int:
    """Ranges a batch's rows are cut into: the ingest's workers, at most the usable cores."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(DEFAULT_WORKERS, usable or 1))


def ranges(n: int, parts: int) -> list[tuple[int, int]]:
    """``[0, n)`` cut in at most ``parts`` contiguous ranges of at least :data:`MIN_ROWS` rows."""
    parts = max(1, min(parts, n // MIN_ROWS))
    cuts = [n * i // parts for i in range(parts + 1)]
    return list(itertools.pairwise(cuts))


def over_ranges(kernel: Callable[..., Any], n: int, *args: Any) -> list[Any]:
    """``kernel(*args, start, stop)`` over the ranges of ``[0, n)``, in their order: the first
    on this thread, the others on the pool's."""
    cut = ranges(n, threads())
    if len(cut) == 1:
        return [kernel(*args, 0, n)]
    pool = _executor()
    rest = [pool.submit(kernel, *args, lo, hi) for lo, hi in cut[1:]]
    first = kernel(*args, *cut[0])
    return [first, *(f.result() for f in rest)]


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=threads(), thread_name_prefix="routes")
        return _pool
