"""Every check of `diagnose`: the order the diagnosis lists them in (``LISTED``), and the order
they run in, derived from what each declares it reads (``run_order``)."""

from __future__ import annotations

from collections.abc import Sequence

from mismatchctl.analysis.diagnose.check import LAYERS, Check, CheckModule
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

LISTED: tuple[CheckModule, ...] = (  # as the diagnosis lists them, and its JSON
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


class RegistryError(ValueError):
    """Checks whose declarations cannot be run in an order: a check that reads one not
    registered or of a later layer, two checks of one name, or checks that read each other."""


def run_order(checks: Sequence[CheckModule]) -> list[CheckModule]:
    """The order to run ``checks`` in: each after every check it reads (``READS``), and among
    the checks ready to run the one of the earliest layer, then the one listed first. A check
    reads only checks of its own layer or an earlier one (layers go from data integrity to the
    objective: a check never waits for a later layer's verdict); anything else is refused."""
    listed = {c.NAME: i for i, c in enumerate(checks)}
    if len(listed) != len(checks):
        raise RegistryError("two checks have the same name")
    for c in checks:
        if c.LAYER not in LAYERS:
            raise RegistryError(f"{c.NAME}: layer {c.LAYER!r} is not one of {LAYERS}")
        for read in c.READS:
            if read.NAME not in listed:
                raise RegistryError(f"{c.NAME} reads {read.NAME}, which is not registered")
            if LAYERS.index(read.LAYER) > LAYERS.index(c.LAYER):
                raise RegistryError(
                    f"{c.NAME} ({c.LAYER}) reads {read.NAME} of a later layer ({read.LAYER})"
                )
    order: list[CheckModule] = []
    ran: set[str] = set()
    waiting = list(checks)
    while waiting:
        ready = [c for c in waiting if {r.NAME for r in c.READS} <= ran]
        if not ready:
            names = ", ".join(c.NAME for c in waiting)
            raise RegistryError(f"these checks read each other, none can run first: {names}")
        first = min(ready, key=lambda c: (LAYERS.index(c.LAYER), listed[c.NAME]))
        order.append(first)
        ran.add(first.NAME)
        waiting.remove(first)
    return order


RUN_ORDER = run_order(LISTED)


def run_checks(ctx: Context) -> list[Check]:
    """Every check in ``RUN_ORDER``; the results of those that apply, in ``LISTED`` order."""
    found = {check.NAME: ctx.run(check) for check in RUN_ORDER}
    return [r for check in LISTED if (r := found[check.NAME]) is not None]
