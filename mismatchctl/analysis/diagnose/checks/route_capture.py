"""MoE routes captured or aligned wrongly: the two sides' routes disagree almost everywhere while
the tokens after a flipped route are hardly more mismatched than the others. The logprobs do not
see these flips: the routes are wrong, not the numerics (SkyRL #1908), and replaying them would
make things worse."""

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
    CAPTURE_AGREEMENT: float = 0.5
    """The two sides' routes agree on fewer than half the tokens (every MoE layer's top-k set
    the same)... Numeric flips leave most tokens' routes equal: the calibration corpus' healthy
    MoE runs agree on 97.5% of their tokens, a router in fp8 on 83-90%; routes dumped one
    position late on 8.6%."""

    CAPTURE_RATIO: float = 5.0
    """...while the tokens after a flipped route are under 5 times as mismatched as the others
    (numeric flips carry 18-96x in the corpus; the late routes 2.3x: the flips are not in the
    logprobs)."""


T = Thresholds()

ADVICE = (
    "the routes disagree where the logprobs do not: a capture or alignment bug of the routes, "
    "not routing flips. Check that both sides' routes are aligned per input position "
    "(--routes-aligned input|output), that padding and tool positions hold -1, and the ingest "
    "notes; do not enable or trust routing replay on these routes (replaying mis-captured "
    "routes makes the mismatch worse)"
)


@dataclass(frozen=True, kw_only=True)
class Capture(CheckEvidence):
    """One run's share of tokens whose routes agree on every layer, the vllm_kl of the tokens
    after a flipped route over the others', and whether that is the capture signature."""

    routing_token_agreement: float | None = renamed(R.ROUTING_TOKEN_AGREEMENT)
    flipped_same_ratio: float | None
    capture: bool


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """Each run's routes (``runs``)."""

    runs: dict[str, Capture]


def capture_signature(m: dict[str, Any], ratio: float | None) -> bool:
    """Routes that disagree on most tokens while their flips carry little mismatch."""
    agree = m.get(R.ROUTING_TOKEN_AGREEMENT)
    if agree is None or ratio is None:
        return False
    return agree < T.CAPTURE_AGREEMENT and ratio < T.CAPTURE_RATIO


def run(ctx: Context) -> Check | None:
    if not ctx.report.routing:
        return None
    rows: dict[str, Capture] = {}
    for run, x in ctx.report.routing.items():
        m = x.metrics
        flipped, same = m.get(R.VLLM_KL_FLIPPED), m.get(R.VLLM_KL_SAME)
        ratio = flipped / same if flipped is not None and same else None
        rows[run] = Capture(
            routing_token_agreement=m.get(R.ROUTING_TOKEN_AGREEMENT),
            flipped_same_ratio=ratio,
            capture=capture_signature(m, ratio),
        )
    verdict = worst([FAIL if e.capture else OK for e in rows.values()])
    bad = [run for run, e in rows.items() if e.capture]
    if bad:
        e = rows[bad[0]]
        finding = (
            f"{bad[0]}: the routes agree on {pct(e.routing_token_agreement)} of the tokens, "
            f"yet the tokens after a flipped route are {e.flipped_same_ratio:.2g}x the others "
            f"(numeric flips carry {T.CAPTURE_RATIO:g}x or more): the routes, not the logprobs, "
            "are wrong"
        )
    else:
        finding = "the routes' disagreements are carried by the logprobs (numeric flips)"
    return Check(LAYER, NAME, TITLE, verdict, finding, Evidence(runs=rows), ADVICE if bad else None)
