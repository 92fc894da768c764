"""Severity bands of a batch's ``vllm_kl`` and the per-hardware summary of the step series.

The bands follow the study's groups (METRICS.md): ``low`` <= 1e-3 < ``medium`` <= 2e-2 <
``high`` <= 1e-1 < ``severe``. Upper edges are inclusive.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from mismatchctl.stats import registry as M

# (name, inclusive upper edge), in increasing order.
BANDS: tuple[tuple[str, float], ...] = (
    ("low", 1e-3),
    ("medium", 2e-2),
    ("high", 1e-1),
    ("severe", math.inf),
)
BAND_NAMES: tuple[str, ...] = tuple(name for name, _ in BANDS)


def band(x: float | None) -> str | None:
    """Band of one batch's ``vllm_kl``; None when the value is missing or NaN."""
    if x is None or math.isnan(x):
        return None
    for name, upper in BANDS:
        if x <= upper:
            return name
    return BANDS[-1][0]


def step_summary(values: Iterable[float | None]) -> dict[str, float | int | None]:
    """Median, p90 (numpy 'linear'), max of per-step ``vllm_kl`` and the share of steps per band.

    Keys (registry metrics): ``vllm_kl_step_median``, ``vllm_kl_step_p90``,
    ``vllm_kl_step_max``, ``band_share_<band>``. Missing or NaN values are skipped; with no
    value left every statistic is None.
    """
    xs = np.array([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    out: dict[str, float | int | None] = {}
    if len(xs) == 0:
        out.update(dict.fromkeys([M.VLLM_KL_STEP_MEDIAN, M.VLLM_KL_STEP_P90, M.VLLM_KL_STEP_MAX]))
        out.update({M.BAND_SHARE[name]: None for name in BAND_NAMES})
        return out
    median, p90 = np.percentile(xs, [50, 90], method="linear")
    out[M.VLLM_KL_STEP_MEDIAN] = _finite_or_inf(median)
    out[M.VLLM_KL_STEP_P90] = _finite_or_inf(p90)
    out[M.VLLM_KL_STEP_MAX] = float(xs.max())
    counts = dict.fromkeys(BAND_NAMES, 0)
    for x in xs.tolist():
        counts[band(x)] += 1
    out.update({M.BAND_SHARE[name]: counts[name] / len(xs) for name in BAND_NAMES})
    return out


def _finite_or_inf(x: float) -> float | None:
    """Interpolating between two infinite steps gives NaN: report None rather than NaN."""
    return None if math.isnan(x) else float(x)
