"""Per-token quantities of the mismatch as the metrics define them (docs/metrics.md), for the
code that reads tokens outside the kernels (``tokens``, ``show``, the paired comparison, the
routing pass, bisect): one function each, so that a token's K3 is the same everywhere.

Every numpy K3 of the stats and the engines is ``k3`` (the chunk sums, the sequence and bin
sums, the shifts, the what-if layout, the keys' log ratio; a clamped K3 is ``k3`` of the clamped
``r``); ``chunk.token_columns`` writes it as ``rho_m1 - r`` because it keeps ``rho - 1`` for
other columns: the same numpy expression, so the same bits. The compiled numba loops
(``kernels.py``, ``cube/kernels.py``) keep their own inline
``math.expm1(r) - r``: a loop compiled by numba cannot call a numpy function of arrays per
token. Their numpy twins (``kernels_numpy.py``) match them bit for bit
(tests/stats/test_kernels_numpy.py); the device monitor's torch form is ``monitor/device.py``."""

from __future__ import annotations

import numpy as np


def k3(r: np.ndarray) -> np.ndarray:
    """K3 = rho - 1 - r of each log-ratio ``r = trainer - rollout``, by ``expm1`` (accurate
    where |r| is tiny); +inf where rho overflows float64, as in ``vllm_kl``. Keeps the dtype."""
    with np.errstate(over="ignore"):
        return np.expm1(r) - r
