"""MoE routes captured or aligned wrongly: the two sides' top-k sets differ on most (token, layer)
routes, far more than any numeric difference of the same weights flips them. The dumped routes
are wrong, not the numerics (SkyRL #1908): replaying them would make things worse, and a trainer
that replays them already carries them into its logprobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mismatchctl.analysis.diagnose.check import (
    DATA,
    FAIL,
    OK,
    Check,
    CheckEvidence,
    absent,
    renamed,
    worst,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.stats import routing_sums as R

NAME = "route_capture"
LAYER = DATA
TITLE = "MoE routes captured as computed"
ORDER = 135
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    CAPTURE_LAYER_AGREEMENT: float = 0.5
    """The two sides' top-k sets agree on fewer than half of the (token, layer) routes. Numeric
    flips of the same weights leave most layer routes equal, however deep the model (a token's
    routes agree on every layer ever less often as layers are added: 6% of the tokens of a
    48-layer model, against about 90% of its layer routes): the sample MoE's healthy runs agree
    on 99.2% of their layer routes, its router in fp8 on 94-97%; the Qwen2-MoE family's
    (16 experts, top-4) healthy runs on 98%, its routers in fp8 on 86-92%, an fp8 KV cache on
    93%, weights a whole RL step behind on 77-80%. Routes dumped a position late agree on 21%
    (sample MoE) and 4.6% (family), each layer written in the next layer's slot on 0.04%, and a
    trainer replaying each position's routes at the next on 4.9% (its logprobs follow them:
    5310x its baseline). But a pre-training checkpoint served (far-apart weights, 570-1200x)
    agrees on 26-29% too (4.9% in a 6-layer, 32-expert, top-8 shape): under half is a capture
    bug only when the alignment test says the routes are not their positions' (below)."""

    MISALIGNED_AGREEMENT: float = 0.5
    """The alignment test (``stats/routing_sums.RoutingPartial.alignment``): set a position
    before or after, or a layer below or above, the trainer's routes agree with the rollout's on
    half the (token, layer) routes or more, and more than aligned: the routes are misaligned by
    that much. The family's capture faults: 98.2-100% at their shift (a position late, a layer
    off, a replay a position late), in the three draws of both shapes; aligned, 0-4.9%."""

    ALIGNED_OVER_SHIFTED: float = 2.0
    """Under half the routes agree and no shift aligns them: the routes are still their positions'
    when the aligned share is at least twice the best misaligned one (a neighbour's routes share
    some experts by the context they share: 1.7-5.6% of the layer routes at top-4 of 16,
    0.2-0.7% at top-8 of 32). Far-apart weights: 7.4x and 12x (27-29% against 2.3-3.9%) and 23x
    (5.4% against 0.24%) in the three draws; healthy runs 20-131x, stale weights 14-96x. Routes
    of other tokens (another sample's, garbage) agree aligned no more than misaligned: a capture
    bug. Parts written before the test: under half is a capture bug, as before it."""


T = Thresholds()

ADVICE = (
    "the two sides' routes are unrelated on most layers: a capture or alignment bug of the "
    "routes, not routing flips. Check that both sides' routes are aligned per input position "
    "(--routes-aligned input|output), that each layer's routes sit in their own slot, that "
    "padding and tool positions hold -1, and the ingest notes; do not enable or trust routing "
    "replay on these routes: a trainer that replays them misaligned computes another function "
    "(the logprobs then follow the wrong routes)"
)


@dataclass(frozen=True, kw_only=True)
class Capture(CheckEvidence):
    """One run's share of (token, layer) routes whose top-k sets agree and of tokens whose routes
    agree on every layer, the vllm_kl of the tokens after a flipped route over the others',
    whether that is the capture signature, the alignment test (``alignment``: the agreement
    once the trainer's routes are set a position or a layer off; absent for parts written
    before it) and the shift that aligns the routes (``misaligned``, when one does)."""

    routing_layer_agreement: float | None = renamed(R.ROUTING_LAYER_AGREEMENT)
    routing_token_agreement: float | None = renamed(R.ROUTING_TOKEN_AGREEMENT)
    flipped_same_ratio: float | None
    capture: bool
    alignment: dict[str, float | None] | None = absent()
    misaligned: str | None = absent()


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """Each run's routes (``runs``)."""

    runs: dict[str, Capture]


@dataclass(frozen=True)
class Alignment:
    """What the alignment test says of one run's routes: ``misaligned`` (the shift of
    ``R.SHIFTS`` that aligns them, with its agreement) or ``own`` (under half agree, but
    aligned far more than any shift: their positions' routes, of far-apart functions)."""

    capture: bool
    misaligned: str | None = None
    agreement: float | None = None  # at the shift that aligns them, or the best shift's
    own: bool = False


def alignment(m: dict[str, Any], shifted: dict[str, float | None] | None) -> Alignment:
    """The verdict on a run's routes from its layer agreement ``m`` (its routing metrics) and
    its alignment test ``shifted`` (None or all None: parts written before the test)."""
    agree = m.get(R.ROUTING_LAYER_AGREEMENT)
    found = {k: v for k, v in (shifted or {}).items() if v is not None}
    if agree is None:
        return Alignment(False)
    if found:
        shift, best = max(found.items(), key=lambda kv: kv[1])
        if best >= T.MISALIGNED_AGREEMENT and best > agree:
            return Alignment(True, shift, best)
        if agree >= T.CAPTURE_LAYER_AGREEMENT:
            return Alignment(False)
        if agree >= T.ALIGNED_OVER_SHIFTED * best:
            return Alignment(False, None, best, own=True)
        return Alignment(True, None, best)
    return Alignment(agree < T.CAPTURE_LAYER_AGREEMENT)


def capture_signature(m: dict[str, Any], shifted: dict[str, float | None] | None) -> bool:
    """Routes that are not their positions': misaligned, or unrelated on most (token, layer)
    routes where no shift aligns them."""
    return alignment(m, shifted).capture


MEANS = {
    "position_before": "dumped or replayed a position late",
    "position_after": "dumped or replayed a position early",
    "layer_below": "every layer written in the next layer's slot",
    "layer_above": "every layer written in the slot before its own",
}
"""What routes misaligned by each shift of ``R.SHIFTS`` were (``R.SHIFT_TEXT``: how it sets them)."""


def run(ctx: Context) -> Check | None:
    if not ctx.report.routing:
        return None
    rows: dict[str, Capture] = {}
    tests: dict[str, Alignment] = {}
    for run, x in ctx.report.routing.items():
        m = x.metrics
        shifted = x.partial.alignment()
        test = tests[run] = alignment(m, shifted)
        flipped, same = m.get(R.VLLM_KL_FLIPPED), m.get(R.VLLM_KL_SAME)
        rows[run] = Capture(
            routing_layer_agreement=m.get(R.ROUTING_LAYER_AGREEMENT),
            routing_token_agreement=m.get(R.ROUTING_TOKEN_AGREEMENT),
            flipped_same_ratio=flipped / same if flipped is not None and same else None,
            capture=test.capture,
            alignment=shifted if any(v is not None for v in shifted.values()) else None,
            misaligned=test.misaligned,
        )
    verdict = worst([FAIL if e.capture else OK for e in rows.values()])
    bad = [run for run, e in rows.items() if e.capture]
    if not bad:
        own = [run for run, t in tests.items() if t.own]
        finding = (
            "the routes agree on most (token, layer) routes: their disagreements are numeric flips"
            if not own
            else _own(own[0], rows[own[0]], tests[own[0]])
        )
        return Check(LAYER, NAME, TITLE, verdict, finding, Evidence(runs=rows))
    e, t = rows[bad[0]], tests[bad[0]]
    agree = (
        f"{bad[0]}: the two sides' top-k sets agree on {pct(e.routing_layer_agreement)} of the "
        "(token, layer) routes"
    )
    if t.misaligned is not None:
        finding = (
            f"{agree}, and on {pct(t.agreement)} with the trainer's routes set "
            f"{R.SHIFT_TEXT[t.misaligned]}: the routes are misaligned, "
            f"{MEANS[t.misaligned]}"
        )
    else:
        finding = (
            f"{agree} (numeric flips of the same weights leave over "
            f"{pct(T.CAPTURE_LAYER_AGREEMENT)} equal) and on {pct(e.routing_token_agreement)} of "
            "the tokens"
            + (
                f"; set a position or a layer off, on {pct(t.agreement)}: the routes are not "
                "their positions'"
                if t.agreement is not None
                else ": the routes are unrelated (its routing parts were ingested before the "
                "alignment test: ingest the run again to tell routes misaligned from routes of "
                "far-apart weights)"
            )
        )
    return Check(LAYER, NAME, TITLE, verdict, finding, Evidence(runs=rows), ADVICE)


def _own(run: str, e: Capture, t: Alignment) -> str:
    agree, best = e.routing_layer_agreement or 0.0, t.agreement or 0.0
    times = f"{agree / best:.2g}x" if best > 0 else "far"
    return (
        f"{run}: the two sides' top-k sets agree on {pct(agree)} of the (token, layer) routes, "
        f"under half, but {times} more than set a position or a layer off ({pct(best)}): "
        "they are their positions' routes, computed by far-apart functions (other weights, "
        "another model on one side), not a capture bug"
    )
