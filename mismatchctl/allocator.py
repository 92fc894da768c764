"""Keep freed memory in the process instead of handing it back to the OS at once.

The kernels allocate and free megabyte-sized temporaries for every slice of tokens (a few per
262k-token slice), and ingest does the same per batch. glibc serves such blocks with ``mmap`` and
unmaps them on ``free``, so every slice page-faults its memory in again: measured here, a fifth of
a report's time and a third of an ingest's went to the kernel zeroing pages. Raising the mmap and
trim thresholds lets freed blocks be reused; the peak memory is unchanged (it is set by the
largest slice in flight), the process just keeps it until it exits.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 64 << 20  # blocks above this still get their own mapping
TRIM_THRESHOLD = 1 << 30  # free memory at the top of the heap kept up to this much

_done = False


def keep_freed_memory() -> bool:
    """Raise glibc's thresholds, once per process; False where there is no glibc (macOS,
    musl): nothing to do there."""
    global _done
    if _done or not sys.platform.startswith("linux"):
        return _done
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
    return _done
