"""Rollouts made with older weights: from a weight version column of the dumps (the extra's
``LagSums``) or a weight-lag tag of the run; the staleness check judges them, the localized
check's advice names them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mismatchctl.analysis.diagnose.context import Context

STALE_TAGS = ("weight_lag", "staleness", "policy_lag")
"""Run tags naming how many weight versions the rollouts lag behind the trainer (an integer):
``--tag weight_lag=1`` at ingest. A lag of 1 or more is a policy mismatch by construction."""


def tagged_lags(ctx: Context) -> dict[str, int]:
    """Runs of the selection tagged with a weight lag (``STALE_TAGS``), and the lag."""
    out = {}
    for run in ctx.report.selection.runs:
        for tag in STALE_TAGS:
            value = run.tags.get(tag)
            if value is not None and value.strip().lstrip("-").isdigit():
                out[run.name] = int(value)
                break
    return out


def stale(ctx: Context) -> bool:
    """Some rollouts of the selection came from older weights (a weight version column or a
    weight-lag tag)."""
    lags = ctx.state.weight_lags.tokens
    return any(lag for lag, n in lags.items() if lag and n > 0) or any(tagged_lags(ctx).values())
