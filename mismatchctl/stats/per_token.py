"""Per-token quantities of the mismatch as the metrics define them (docs/metrics.md), for the
code that reads tokens outside the kernels (``tokens``, ``show``, the paired comparison, the
routing pass, bisect, diagnose's extras): one function each, so that a token's K3 is the same
everywhere.

A token's ``rho - 1`` is ``expm1`` of its log-ratio by ``stats/exp_poly.py``'s polynomial
(:func:`expm1`: the compiled loop on a large array, its numpy twin otherwise, the same bits),
the one the report's per-token loop takes (``kernels.token_exps``); its K3 is ``expm1(r) - r``
(:func:`k3`). Every numpy K3 of the stats and the engines is ``k3`` (the chunk sums, the
sequence and bin sums, the shifts, the what-if layout, the keys' log ratio; a clamped K3 is
``k3`` of the clamped ``r``); ``chunk.token_columns`` writes it as ``rho_m1 - r`` from the same
polynomial (in numpy: the Monitor's host code never loads numba), so the same bits. The
localization's compiled cube (``cube/kernels.py``) keeps its own inline
``math.expm1(r) - r`` (the C library's: it may differ in the last bit); the device monitor's
torch form is ``monitor/device.py``. A float32 array keeps numpy's float32 ``expm1``."""

from __future__ import annotations

import numpy as np

from mismatchctl.stats.kernel_choice import EXP_COST, kernels_for


def expm1(r: np.ndarray) -> np.ndarray:
    """``rho - 1 = expm1(r)`` of each log-ratio (any shape; +inf where rho overflows float64)."""
    r = np.asarray(r)
    if r.dtype != np.float64:
        with np.errstate(over="ignore"):
            return np.expm1(r)
    flat = np.ascontiguousarray(r).reshape(-1)
    return kernels_for(flat.size * EXP_COST).expm1s(flat).reshape(r.shape)


def k3(r: np.ndarray) -> np.ndarray:
    """K3 = rho - 1 - r of each log-ratio ``r = trainer - rollout``, by ``expm1`` (accurate
    where |r| is tiny); +inf where rho overflows float64, as in ``vllm_kl``. Keeps the dtype."""
    with np.errstate(invalid="ignore"):
        return expm1(r) - r
