"""MoE routes captured or aligned wrongly: the dumped routes, not the logprobs, are wrong."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.causes.hypothesis import Support
from mismatchctl.analysis.diagnose.check import CheckModule, fired
from mismatchctl.analysis.diagnose.checks import route_capture
from mismatchctl.analysis.diagnose.context import Context

KEY = "routing_capture"
CLASS = "MoE"
LABEL = "MoE routes captured or aligned wrongly"
SIGNATURE = (
    "the routes of the two sides disagree on most tokens (a few % agree) while the tokens "
    "after a flipped route are hardly more mismatched than the others"
)
TELLS_APART = (
    "numeric routing flips leave most routes equal and carry tens of times the others' "
    "mismatch; replay already on agrees on every route"
)
EVERY_TOKEN = False
EXPLAINS = ("routing", "sequences")
CORRECTION = "no, and never replay these routes: fix the capture first"
READS: tuple[CheckModule, ...] = (route_capture,)
PRECONDITION = True
"""Wrong routes make every routing number wrong: named first, as a data fault."""


def support(ctx: Context) -> Support | None:
    found = ctx.result(route_capture)
    if found is None:
        return None
    return Support(
        verdict=found.verdict,
        share=1.0 if fired(found) else 0.0,
        because=found.finding,
        checks=(route_capture.NAME,),
        where="the dumped routes",
    )


def advice(ctx: Context, found: Support) -> str:
    return route_capture.ADVICE
