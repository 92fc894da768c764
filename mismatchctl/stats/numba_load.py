"""``kernel``: numba's ``njit(cache=True)``, loading its cached machine code without first
preparing numba's compiler.

Every compiled loop of mismatchctl is cached on disk. Before it loads a cached function, numba's
``Cache.load_overload`` refreshes the target context: it imports and installs the
implementations of everything numba can compile (numpy, math, typed containers, random...),
0.06-0.4 s of a process's first kernel call as measured (most of that call), which a function
loaded from the cache never uses: its machine code needs numba's runtime (``rtsys``) and the
helper symbols every context installs when it is made. A cache miss compiles as before (the
compiler refreshes the context itself). Only the kernels made here load this way: numba's own
method is left as it is for every other function of the process (a ``numba.vectorize`` lowers
its ufunc wrapper after the load, which needs the refreshed context).

The cache of a kernel loads this way only when numba's method is the one it replaces (the
same names in its code: ``refresh``, ``_guard_against_spurious_io_errors``,
``_load_overload``); with another numba, or ``MISMATCHCTL_NUMBA_REFRESH=1`` set, numba's own
method runs. docs/benchmarks.md ("Start-up") has the measurements.

``is_cold`` says whether a kernel's first call will compile it (``mismatchctl demo`` announces
a first run's compile with it).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from typing import Any

import numba
from numba.core import caching
from numba.core.cpu import CPUContext
from numba.core.runtime import rtsys

KEEP_REFRESH = "MISMATCHCTL_NUMBA_REFRESH"
_REPLACES = ("refresh", "_guard_against_spurious_io_errors", "_load_overload")


class NoRefreshCache(caching.FunctionCache):
    """numba's function cache, with the runtime initialised instead of the context refreshed
    before a load (the CPU target only)."""

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        if not isinstance(target_context, CPUContext):
            return super().load_overload(sig, target_context)
        rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)
        return None  # the guard swallowed an I/O error: numba compiles


def loads_without_refresh(method: Callable[..., Any] | None = None) -> bool:
    """Whether kernels load without the refresh: ``method`` (by default numba's
    ``Cache.load_overload``) is the one :class:`NoRefreshCache` replaces, and
    ``MISMATCHCTL_NUMBA_REFRESH`` is unset."""
    if os.environ.get(KEEP_REFRESH, "") not in ("", "0"):
        return False
    own = caching.Cache.load_overload if method is None else method
    return own.__code__.co_names == _REPLACES


def kernel(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit(cache=True, **options)``, its cache a :class:`NoRefreshCache` when
    :func:`loads_without_refresh`."""

    def make(fn: Callable[..., Any]) -> Any:
        dispatcher = numba.njit(cache=True, **options)(fn)
        cache = getattr(dispatcher, "_cache", None)
        if type(cache) is caching.FunctionCache and loads_without_refresh():
            cache.__class__ = NoRefreshCache
        return dispatcher

    return make


def is_cold(dispatcher: Any) -> bool | None:
    """Whether a kernel's on-disk cache holds no machine code for its source as it is now, so
    that its first call compiles it: no index file (``<module>.<name>-<line>.py311.nbi``), one
    of another numba, or one stamped with another version of the source file. None when the
    cache cannot be read (another numba's layout)."""
    try:
        return not dispatcher._cache._cache_file._load_index()
    except (AttributeError, OSError, EOFError, ValueError, pickle.UnpicklingError):
        return None


def cache_path(dispatcher: Any) -> str | None:
    """The directory numba caches a kernel in (``__pycache__`` beside its source, or under
    ``NUMBA_CACHE_DIR``); None without a cache."""
    path = getattr(getattr(dispatcher, "_cache", None), "cache_path", None)
    return path if isinstance(path, str) else None
