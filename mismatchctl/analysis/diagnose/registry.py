"""Every check of `diagnose`, in the order the diagnosis lists them."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.check import Check, CheckModule
from mismatchctl.analysis.diagnose.checks import (
    alignment,
    baseline,
    cause,
    curve_spikes,
    duplicates,
    empty_sequences,
    hardware,
    hot_sequences,
    localized,
    low_probability,
    objective,
    offset,
    policy_signs,
    regimes,
    rise_before_drop,
    routing_flips,
    routing_replay,
    sentinels,
    severe_batches,
    spikes,
    spiral,
    staleness,
    temperature,
    token_classes,
    token_ids,
    tool_responses,
    top_p,
    trailing_padding,
    trend,
    turn_edges,
    turn_ends,
)
from mismatchctl.analysis.diagnose.context import Context

LISTED: tuple[CheckModule, ...] = (
    alignment,
    token_ids,
    sentinels,
    empty_sequences,
    trailing_padding,
    duplicates,
    offset,
    temperature,
    top_p,
    turn_edges,
    turn_ends,
    token_classes,
    routing_replay,
    baseline,
    localized,
    low_probability,
    tool_responses,
    hardware,
    hot_sequences,
    routing_flips,
    spikes,
    regimes,
    trend,
    spiral,
    severe_batches,
    staleness,
    policy_signs,
    curve_spikes,
    rise_before_drop,
    cause,
    objective,
)


def run_checks(ctx: Context) -> list[Check]:
    """Every check that applies, in the order listed."""
    for check in LISTED:
        result = check.run(ctx)
        if result is not None:
            ctx.done[result.name] = result
    return list(ctx.done.values())
