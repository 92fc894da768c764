"""MoE routes captured or aligned wrongly: the two sides' top-k sets differ on most (token, layer)
routes, far more than any numeric difference of the same weights flips them. The dumped routes
are wrong, not the numerics (SkyRL #1908): replaying them would make things worse, and a trainer
that replays them already carries them into its logprobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mismatchctl.analysis.diagnose.check import DATA, FAIL, OK, Check, CheckEvidence, renamed, worst
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
    93%, weights a whole RL step behind on 80%. Routes dumped a position late agree on 21%
    (sample MoE) and 4.6% (family), each layer written in the next layer's slot on 0.04%, and a
    trainer replaying each position's routes at the next on 4.9% (its logprobs follow them:
    5310x its baseline). A token's lone flips are no evidence here: once most layer routes
    differ, few tokens or none agree on every layer to compare them with."""


T = Thresholds()

ADVICE = (
    "the two sides' routes are unrelated on most layers: a capture or alignment bug of the "
    "routes, not routing flips. Check that both sides' routes are aligned per input position "
    "(--routes-aligned input|output), that each layer's routes sit in their own slot, that "
    "padding and tool positions hold -1, and the ingest notes; do not enable or trust routing "
    "replay on these routes: a trainer that replays them misaligned computes another function "
    "(the logprobs then follow the wrong routes). Were the routes right, the two sides would "
    "run far-apart weights: compare their weight versions"
)


@dataclass(frozen=True, kw_only=True)
class Capture(CheckEvidence):
    """One run's share of (token, layer) routes whose top-k sets agree and of tokens whose routes
    agree on every layer, the vllm_kl of the tokens after a flipped route over the others', and
    whether that is the capture signature."""

    routing_layer_agreement: float | None = renamed(R.ROUTING_LAYER_AGREEMENT)
    routing_token_agreement: float | None = renamed(R.ROUTING_TOKEN_AGREEMENT)
    flipped_same_ratio: float | None
    capture: bool


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """Each run's routes (``runs``)."""

    runs: dict[str, Capture]


def capture_signature(m: dict[str, Any]) -> bool:
    """Routes that differ on most (token, layer) routes: no numeric flip of the same weights."""
    agree = m.get(R.ROUTING_LAYER_AGREEMENT)
    return agree is not None and agree < T.CAPTURE_LAYER_AGREEMENT


def run(ctx: Context) -> Check | None:
    if not ctx.report.routing:
        return None
    rows: dict[str, Capture] = {}
    for run, x in ctx.report.routing.items():
        m = x.metrics
        flipped, same = m.get(R.VLLM_KL_FLIPPED), m.get(R.VLLM_KL_SAME)
        rows[run] = Capture(
            routing_layer_agreement=m.get(R.ROUTING_LAYER_AGREEMENT),
            routing_token_agreement=m.get(R.ROUTING_TOKEN_AGREEMENT),
            flipped_same_ratio=flipped / same if flipped is not None and same else None,
            capture=capture_signature(m),
        )
    verdict = worst([FAIL if e.capture else OK for e in rows.values()])
    bad = [run for run, e in rows.items() if e.capture]
    if not bad:
        finding = (
            "the routes agree on most (token, layer) routes: their disagreements are numeric flips"
        )
        return Check(LAYER, NAME, TITLE, verdict, finding, Evidence(runs=rows))
    e = rows[bad[0]]
    finding = (
        f"{bad[0]}: the two sides' top-k sets agree on {pct(e.routing_layer_agreement)} of the "
        f"(token, layer) routes (numeric flips of the same weights leave over "
        f"{pct(T.CAPTURE_LAYER_AGREEMENT)} equal) and on {pct(e.routing_token_agreement)} of "
        "the tokens: the routes are unrelated"
    )
    return Check(LAYER, NAME, TITLE, verdict, finding, Evidence(runs=rows), ADVICE)
