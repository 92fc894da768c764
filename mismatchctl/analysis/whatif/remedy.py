"""Remedy sanity: whether a correction would discard the signal instead of correcting it, by the
thresholds diagnose's ``objective`` check uses (``diagnose/corrections.py``): an ESS of the applied
weights below one half, most of its units rejected, or nearly every ratio clipped at the cap
(where the ESS of the near-constant weights is meaningless)."""

from __future__ import annotations

from typing import Any

from mismatchctl.analysis.diagnose import corrections
from mismatchctl.stats import registry as M


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def discards_signal(metrics: dict[str, Any], unit: str, action: str) -> str | None:
    """Why a correction with these results (whatif's metrics of one group) discards the
    signal, or None when it keeps it. ``unit``: token or sequence; ``action``: clipped or
    rejected."""
    share = metrics.get(M.SEQUENCE_FRACTION if unit == "sequence" else M.TOKEN_FRACTION)
    if action == "clipped" and share is not None and share >= corrections.MAX_CORRECTION_CLIPPED:
        return f"{pct(share)} of {unit}s at the cap (ESS meaningless)"
    if action == "rejected" and share is not None and share > corrections.MAX_CORRECTION_REJECTED:
        return f"rejects {pct(share)} of {unit}s"
    if not metrics.get(M.UNITS, metrics.get(M.TOKENS)):
        return None
    ess = metrics.get(M.ESS)
    if ess is None:
        return "every weight is 0"
    if ess < corrections.MIN_CORRECTION_ESS:
        return f"ESS {pct(ess)} < {pct(corrections.MIN_CORRECTION_ESS)}"
    return None


def remedy_dict(why: str | None) -> dict[str, Any]:
    """The JSON of a remedy-sanity verdict."""
    return {"discards_signal": why is not None, "why": why}
