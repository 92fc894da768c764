"""Every cause `diagnose` can name (one module each); their listing order only breaks exact ties
of score (docs/diagnose.md)."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.causes import (
    code_path,
    data,
    growth,
    hardware,
    policy,
    precision,
    routing,
    routing_capture,
    semantics,
    sequences,
    stop,
    template,
    tool_turns,
)
from mismatchctl.analysis.diagnose.causes.hypothesis import CauseModule
from mismatchctl.analysis.diagnose.check import Every
from mismatchctl.analysis.diagnose.context import CheckModule

CAUSES: tuple[CauseModule, ...] = (
    data,
    semantics,
    template,
    stop,
    routing_capture,
    routing,
    hardware,
    code_path,
    tool_turns,
    sequences,
    growth,
    policy,
    precision,
)  # type: ignore[assignment]


def reads() -> tuple[CheckModule | Every, ...]:
    """The checks every cause reads (the cause check declares them)."""
    found: dict[object, CheckModule | Every] = {}
    for cause in CAUSES:
        for read in cause.READS:
            found[read if isinstance(read, Every) else read.NAME] = read
    return tuple(found.values())


def by_key(key: str) -> CauseModule:
    return next(c for c in CAUSES if key == c.KEY)
