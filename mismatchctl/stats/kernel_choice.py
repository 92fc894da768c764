"""Which kernels a call runs: the compiled ones (numba) or their numpy twins.

Both give the same bits (``stats/kernels_numpy.py`` says how), so the choice is only about time.
Loading numba and the compiled kernels costs a process 0.2-0.7 s once; the twins cost about 1 us
a token more than the compiled loop (0.15-0.2 us). A process therefore gives the twins calls of
up to ``NUMPY_CALL`` tokens until they have had ``NUMPY_BUDGET`` tokens in all (about 0.25 s of
their time), and the compiled kernels every other call, and every call once they are loaded. A
report or a comparison of a store of up to about a hundred thousand tokens never loads numba; a
large store's first slice (262,144 tokens) goes to the compiled kernels at once; a store in
between pays at most the budget before loading numba anyway.

Work other than ``cell_sums``' tokens is counted in tokens of the same twin time: the costs
below, measured on the bench machine (docs/benchmarks.md "Start-up").
"""

from __future__ import annotations

import threading
from types import ModuleType

NUMPY_CALL = 1 << 16  # tokens: a call over this goes to the compiled kernels
NUMPY_BUDGET = 1 << 18  # tokens: what the twins may have in all (~0.25 s)
PICK_COST = 1 / 64  # resample_sums, a picked row's column: 10-20 ns of the twin
HASH_COST = 1 / 16  # sequence_hashes, a token: 70 ns of the twin
EXP_COST = 1 / 32  # exps / expm1s, a value: the twin's polynomial, 30-40 ns

_lock = threading.Lock()
_spent = 0.0
_compiled: ModuleType | None = None


def kernels_for(work: float) -> ModuleType:
    """The kernels module for a call of ``work`` tokens (or their cost in tokens; 0 for the
    merges and scans that go with a call already counted): the numpy twins while the budget
    lasts and the compiled kernels are not loaded, else the compiled ones."""
    if _twins(work):
        from mismatchctl.stats import kernels_numpy

        return kernels_numpy
    return compiled()


def hashes_for(tokens: int) -> ModuleType:
    """The module whose ``sequence_hashes`` hashes ``tokens`` tokens (``stats/seqhash.py`` or
    its twin)."""
    if _twins(tokens * HASH_COST):
        from mismatchctl.stats import kernels_numpy

        return kernels_numpy
    from mismatchctl.stats import seqhash

    return seqhash


def compiled() -> ModuleType:
    """The compiled kernels, loaded on first use (numba: ~0.5 s to import)."""
    global _compiled
    from mismatchctl.stats import kernels

    _compiled = kernels
    return kernels


def _twins(work: float) -> bool:
    """Whether a call of ``work`` goes to the twins (and is counted against the budget)."""
    global _spent
    if _compiled is not None or work > NUMPY_CALL:
        return False
    with _lock:
        if _spent + work > NUMPY_BUDGET:
            return False
        _spent += work
        return True
