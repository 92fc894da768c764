"""Per-token quantities of the mismatch as the metrics define them (docs/metrics.md), for the
code that reads tokens outside the kernels (``tokens``, ``show``, the paired comparison, the
routing pass, bisect): one function each, so that a token's K3 is the same everywhere.

The compiled kernels (``kernels.py``) and their numpy twins (``kernels_numpy.py``) compute the
same K3 inside their loops, bit for bit (tests/stats/test_kernels_numpy.py)."""

from __future__ import annotations

import numpy as np


def k3(r: np.ndarray) -> np.ndarray:
    """K3 = rho - 1 - r of each log-ratio ``r = trainer - rollout``, by ``expm1`` (accurate
    where |r| is tiny); +inf where rho overflows float64, as in ``vllm_kl``. Keeps the dtype."""
    with np.errstate(over="ignore"):
        return np.expm1(r) - r
