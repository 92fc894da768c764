"""MoE routing flips: the tokens produced at positions whose routes differ between the two sides
carry the mismatch (bf16 router logits near a tie)."""

from __future__ import annotations

from mismatchctl.analysis.diagnose.advice import REPLAY_ADVICE
from mismatchctl.analysis.diagnose.causes.hypothesis import Support, part_share
from mismatchctl.analysis.diagnose.check import evidence_of, fired
from mismatchctl.analysis.diagnose.checks import routing_flips
from mismatchctl.analysis.diagnose.context import CheckModule, Context

KEY = "routing"
CLASS = "MoE"
LABEL = "MoE routing flips"
SIGNATURE = (
    "the tokens produced at a position whose routes differ carry most of the K3, at a rate well "
    "above the tokens whose routes agree"
)
TELLS_APART = (
    "routes captured or aligned wrongly disagree almost everywhere while the flipped tokens are "
    "no hotter than the others (the routes, not the logprobs, are wrong: replay would hurt)"
)
EVERY_TOKEN = False
EXPLAINS = ("sequences", "policy", "code_path", "tool_turns")
CORRECTION = "rollout routing replay (R3) roughly halves it"
READS: tuple[CheckModule, ...] = (routing_flips,)


def support(ctx: Context) -> Support | None:
    flips = ctx.result(routing_flips)
    if flips is None or flips.verdict == "n/a":
        return None
    e = evidence_of(flips, routing_flips.Evidence)
    runs = e.runs if e is not None else {}
    best = max(
        runs.values(),
        key=lambda e: part_share(e.routing_k3_share_flipped, e.flipped_same_ratio) or 0.0,
        default=None,
    )
    ratio = best.flipped_same_ratio if best is not None else None
    flipped = best.routing_k3_share_flipped if best is not None else None
    return Support(
        verdict=flips.verdict,
        share=part_share(flipped, ratio) if fired(flips) else 0.0,
        because=flips.finding,
        checks=(routing_flips.NAME,),
        ratio=ratio,
        where="the tokens after a flipped route",
    )


def advice(ctx: Context, found: Support) -> str:
    return REPLAY_ADVICE
