"""How numbers read inside a check's finding."""

from __future__ import annotations

import math


def fmt(x: float | None, digits: int = 3) -> str:
    """Numbers inside findings: 3 significant digits, 'n/a' for missing, 'overflow' for a value
    beyond float64 (e.g. vllm_kl with exp(r) beyond it)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if math.isinf(x):
        return "overflow (beyond float64)"
    return f"{x:.{digits}g}"


def pct(x: float | None) -> str:
    """A share inside findings; a share of an overflowing sum (inf / inf) is 'overflow'."""
    if x is None:
        return "n/a"
    return f"{100 * x:.1f}%" if math.isfinite(x) else "overflow (beyond float64)"


def share(x: float | None) -> str:
    """A share without decimals (``19%``), 'n/a' for missing or not finite."""
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.0f}%"
