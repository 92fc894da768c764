"""MoE routes captured or aligned wrongly: the dumped routes, not the logprobs, are wrong (or
replay is said to be on and the trainer's routes differ from the engine's)."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.causes.hypothesis import Support, worst_of
from mismatchctl.analysis.diagnose.check import fired
from mismatchctl.analysis.diagnose.checks import route_capture, routing_replay
from mismatchctl.analysis.diagnose.context import CheckModule, Context

KEY = "routing_capture"
CLASS = "MoE"
LABEL = "MoE routes captured or aligned wrongly"
SIGNATURE = (
    "the routes are not their positions': set a position or a layer off, the trainer's routes "
    "agree with the rollout's (dumped or replayed a position late, a layer off), or fewer than "
    "half the (token, layer) routes agree and no more than a neighbour's do"
)
TELLS_APART = (
    "numeric routing flips, a router in fp8, even weights an RL step behind leave most layer "
    "routes equal, however deep the model; far-apart weights leave fewer, but many times more "
    "than a position or a layer off (their positions' routes: the policy); replay already on "
    "agrees on every route"
)
EVERY_TOKEN = True
"""Wrong routes are a fault of the dumps, not of a part of the tokens: a cause of the logprobs
beside them (an fp8 KV cache's excess over the baseline) is weighed on the whole run."""
EXPLAINS = ("routing", "sequences", "policy", "semantics")
"""A trainer that replays the routes misaligned computes another function at every token: the
far-apart distributions of the policy, a transform's shape of the semantics."""
CORRECTION = "no, and never replay these routes: fix the capture first"
READS: tuple[CheckModule, ...] = (route_capture, routing_replay)
PRECONDITION = True
"""Wrong routes make every routing number wrong: named first, as a data fault."""
ANOTHER_FUNCTION = ("policy", "semantics")


def beside(alarmed: set[str]) -> bool:
    """Whether a cause of the logprobs may be named beside the wrong routes, given the keys of
    the causes that alarm: not where another function alarms (``ANOTHER_FUNCTION``), which a
    trainer replaying misaligned routes makes of every token, and every check of the logprobs
    with it (the family's trainer replaying each position's routes at the next: 5130-5310x its
    baseline, named policy or semantics and precision beside the routes before this rule; the
    routes dumped late beside an fp8 KV cache: 11-13x, the precision alone)."""
    return not alarmed & set(ANOTHER_FUNCTION)


def support(ctx: Context) -> Support | None:
    """Routes that disagree where the logprobs do not, or replay said on and violated."""
    hits = [c for c in (ctx.result(route_capture), ctx.result(routing_replay)) if fired(c)]
    if not hits:
        found = ctx.result(route_capture)
        return None if found is None else Support("ok", 0.0, found.finding, (found.name,))
    return Support(
        verdict=worst_of(hits),
        share=1.0,
        because=hits[0].finding,
        checks=tuple(c.name for c in hits),
        where="the dumped routes",
    )


def advice(ctx: Context, found: Support) -> str:
    if found.checks == (routing_replay.NAME,):
        return routing_replay.BUG_ADVICE
    return route_capture.ADVICE
