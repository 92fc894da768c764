"""Which per-token kernels a call runs: the compiled ones (numba) or their numpy twins.

Both give the same bits (``stats/kernels_numpy.py`` says how), so the choice is only about time.
Loading numba and the compiled kernels costs a process 0.6-1.1 s once; the twins cost about
1 us a token more than the compiled loop (0.15-0.2 us). A process therefore gives its first
``NUMPY_BUDGET`` tokens to the twins, and any call that would go past it to the compiled
kernels, which then serve every call: a report on a store of up to about a hundred thousand
tokens never loads numba, a large one loads it on its first slice (262,144 tokens, over the
budget), and a store in between pays at most the budget's ~0.1 s before loading numba anyway.
"""

from __future__ import annotations

import threading
from types import ModuleType

NUMPY_BUDGET = 1 << 17  # tokens: ~0.1 s of the twins, a tenth of what loading numba costs

_lock = threading.Lock()
_spent = 0
_compiled: ModuleType | None = None


def kernels_for(n: int) -> ModuleType:
    """The kernels module for a call over ``n`` tokens (or rows): the numpy twins while the
    process's budget lasts and the compiled kernels are not loaded, else the compiled ones."""
    global _spent, _compiled
    if _compiled is None:
        with _lock:
            if _spent + n <= NUMPY_BUDGET:
                _spent += n
                from mismatchctl.stats import kernels_numpy

                return kernels_numpy
    return compiled()


def compiled() -> ModuleType:
    """The compiled kernels, loaded on first use (numba: ~0.5 s to import)."""
    global _compiled
    from mismatchctl.stats import kernels

    _compiled = kernels
    return kernels
