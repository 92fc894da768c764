"""Data integrity: the dump itself is wrong (the sides misaligned, padding or sentinels stored as
tokens, sequences written twice, token ids out of range)."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.causes.hypothesis import Support, worst_of
from mismatchctl.analysis.diagnose.check import DATA, FAIL, Every
from mismatchctl.analysis.diagnose.checks import (
    route_capture,
    routing_replay,
    token_classes,
    turn_edges,
    turn_ends,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context

KEY = "data"
CLASS = "data"
LABEL = "the data (the dump is wrong)"
SIGNATURE = (
    "a writer's error: one side shifted by a position (the lag +-1 correlation beats lag 0), "
    "fill values (0.0 runs, <= -1000), right padding stored as tokens, duplicate sequences"
)
TELLS_APART = "every other number mixes a broken dump in: it is fixed first, whatever else shows"
EVERY_TOKEN = True
EXPLAINS = (
    "template", "stop", "semantics", "policy", "code_path", "hardware", "sequences",
    "tool_turns", "precision", "growth", "routing",
)  # fmt: skip
CORRECTION = "no: fix the writer; a correction would mix the broken rows in"
READS: tuple[CheckModule | Every, ...] = (Every(DATA),)
NOT_DATA = (
    turn_edges.NAME, turn_ends.NAME, token_classes.NAME, route_capture.NAME, routing_replay.NAME,
)  # fmt: skip
"""Checks of the data layer that name another cause (the template, the stop, the routes)."""
PRECONDITION = True
"""A failed data check is named first, whatever the shares: the other numbers mix it in."""


def support(ctx: Context) -> Support | None:
    found = [c for c in ctx.results(DATA) if c.name not in NOT_DATA]
    fails = [c for c in found if c.verdict == FAIL]
    warns = [c for c in found if c.verdict == "warn"]
    hits = fails or warns
    if not hits:
        return Support("ok", 0.0, "the dump is whole", tuple(c.name for c in found))
    return Support(
        verdict=worst_of(hits),
        share=1.0 if fails else 0.0,
        because=f"{hits[0].name}: {hits[0].finding}",
        checks=tuple(c.name for c in hits),
        where="the dump",
    )


def advice(ctx: Context, found: Support) -> str:
    first = next((c for c in ctx.results(DATA) if c.name == found.checks[0]), None)
    head = first.next if first is not None and first.next else "fix the dump"
    return f"{head}; fix the data problems first: every other number mixes them in"
