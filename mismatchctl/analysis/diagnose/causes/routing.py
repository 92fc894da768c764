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
    "against a baseline of the same model without replay, twice its share of (token, layer) "
    "routes flipped or more, the tokens produced at a flipped position carrying the K3 at a "
    "rate well above the tokens whose routes agree"
)
TELLS_APART = (
    "alone, every MoE's flips carry most of its K3 and their rate is the model's own (no "
    "alarm); routes unrelated on most layers are a capture bug (replay would hurt); a "
    "perturbation upstream of the routers (a kernel's part, an fp8 cache) flips routes too, "
    "and its own cause explains more than the flips beyond the baseline's rate"
)
EVERY_TOKEN = False
EXPLAINS = ("sequences", "policy", "code_path", "tool_turns")
CORRECTION = "rollout routing replay (R3) removes most of the flipped tokens' share"
READS: tuple[CheckModule, ...] = (routing_flips,)


def excess_share(e: routing_flips.Flips) -> float:
    """The share of the run's K3 the flips explain beyond the model's own: the flipped tokens'
    part (``part_share``) times the share of the flips the baseline's rate does not account
    for, ``1 - 1/flip_excess`` (a run flipping 2.3x its baseline's routes owes 1/2.3 of its
    flipped tokens' K3 to the model's own flips). Any perturbation upstream of the routers
    flips routes too (the family's off-by-one split-KV merge 2.3x, its fp8 KV cache 3.4x):
    weighed so, the flips its part sets off do not outweigh the part (split-KV: 0.52 of the
    excess against the long-KV part's 0.88), while a router's own fault keeps its flips (the
    router in fp8: 0.55-0.65)."""
    share = part_share(e.routing_k3_share_flipped, e.flipped_same_ratio) or 0.0
    if e.flip_excess is None:  # no baseline's rate, or a baseline that replays (flips none)
        return share
    return share * max(0.0, 1.0 - 1.0 / e.flip_excess)


def support(ctx: Context) -> Support | None:
    flips = ctx.result(routing_flips)
    if flips is None or flips.verdict == "n/a":
        return None
    e = evidence_of(flips, routing_flips.Evidence)
    runs = e.runs if e is not None else {}
    best = max(runs.values(), key=excess_share, default=None)
    ratio = best.flipped_same_ratio if best is not None else None
    return Support(
        verdict=flips.verdict,
        share=excess_share(best) if fired(flips) and best is not None else 0.0,
        because=flips.finding,
        checks=(routing_flips.NAME,),
        ratio=ratio,
        where="the tokens after a flipped route",
    )


def advice(ctx: Context, found: Support) -> str:
    return REPLAY_ADVICE
