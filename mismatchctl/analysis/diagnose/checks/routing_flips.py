"""MoE routing flips carrying the mismatch: the K3 of tokens produced by a position whose routes
differ on the two sides against the rest, in runs without replay. No check at all for a
selection without routes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from mismatchctl.analysis.diagnose.advice import REPLAY_ADVICE
from mismatchctl.analysis.diagnose.check import (
    FAIL,
    NA,
    OK,
    PATH,
    WARN,
    Check,
    CheckEvidence,
    absent,
    advice_if,
    renamed,
    worst,
)
from mismatchctl.analysis.diagnose.checks import route_capture
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.stats import routing_sums as R

NAME = "routing_flips"
LAYER = PATH
TITLE = "routing flips (MoE)"
ORDER = 200
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    ROUTING_RATIO_WARN: float = 1.5
    """vllm_kl of tokens produced by a position whose routes differ (flipped) over that of the
    others: 1.5x or more says the flips carry excess mismatch. A conservative choice: miles'
    measurements put natural routing at 2.7x the |dlogp| of replayed routes (0.369 against
    0.139), far above it."""

    ROUTING_SHARE_WARN: float = 0.10
    """...and the flipped tokens carry at least this share of the paired tokens' K3 (below it,
    the flips are too few to matter whatever their ratio): a conservative choice."""

    ROUTING_SHARE_FAIL: float = 0.30
    """Flipped tokens carrying 30% of the K3 at the ratio above: routing is a main source of the
    mismatch, rollout routing replay is the fix (with ``FLIP_RATE_FAIL``)."""

    FLIP_RATE_WARN: float = 0.015
    """...and more routes flip than numeric noise flips: the share of (token, layer) routes that
    differ at 1.5% or more. Every MoE without replay has flips carrying most of its K3 (the
    calibration corpus' healthy MoE runs: 68-70% of the K3 at 83-96x the other tokens' rate),
    so that alone is the normal state of an MoE, not a fault (R3 would still roughly halve it:
    said as a note). Its healthy runs flip 0.6% of their layer routes (bf16 engine against an
    fp32 trainer); a router in fp8 flips 2.5% (e4m3) to 4.5% (e5m2)."""

    FLIP_RATE_FAIL: float = 0.04
    """Layer routes flipping at 4% or more with ``ROUTING_SHARE_FAIL``: fail."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Flips(CheckEvidence):
    """One run's routing metrics (``stats/routing_sums.py``); written when there are paired tokens
    on both sides of a flip: the flipped tokens' vllm_kl over the others' and the share of the
    (token, layer) routes that flip."""

    routing_token_agreement: float | None = renamed(R.ROUTING_TOKEN_AGREEMENT)
    routing_layer_agreement: float | None = renamed(R.ROUTING_LAYER_AGREEMENT)
    vllm_kl_flipped: float | None = renamed(R.VLLM_KL_FLIPPED)
    vllm_kl_same: float | None = renamed(R.VLLM_KL_SAME)
    routing_k3_share_flipped: float | None = renamed(R.ROUTING_K3_SHARE_FLIPPED)
    routing_unpaired_tokens: int | None = renamed(R.ROUTING_UNPAIRED_TOKENS)
    flipped_same_ratio: float | None = absent()
    layer_flip_rate: float | None = absent()


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """Each run's flips (``runs``: the runs without replay)."""

    runs: dict[str, Flips]


def run(ctx: Context) -> Check | None:
    """Runs without replay: the K3 of tokens produced by flipped positions against the rest."""
    runs = {r: x for r, x in ctx.report.routing.items() if not x.replay}
    if not runs:
        return None
    results = {run: _flips(x.metrics) for run, x in runs.items()}
    verdict = worst([v for v, _, _ in results.values()])
    shown = [run for run, (v, _, _) in results.items() if v == verdict]
    many = len(results) > 1
    finding = "; ".join((f"{run}: " if many else "") + results[run][1] for run in shown[:3])
    evidence = Evidence(runs={run: e for run, (_, _, e) in results.items()})
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice_if(verdict, REPLAY_ADVICE))


def _flips(m: dict[str, Any]) -> tuple[str, str, Flips]:
    share, flipped, same = (
        m[R.ROUTING_K3_SHARE_FLIPPED],
        m[R.VLLM_KL_FLIPPED],
        m[R.VLLM_KL_SAME],
    )
    evidence = Flips(
        routing_token_agreement=m[R.ROUTING_TOKEN_AGREEMENT],
        routing_layer_agreement=m[R.ROUTING_LAYER_AGREEMENT],
        vllm_kl_flipped=m[R.VLLM_KL_FLIPPED],
        vllm_kl_same=m[R.VLLM_KL_SAME],
        routing_k3_share_flipped=m[R.ROUTING_K3_SHARE_FLIPPED],
        routing_unpaired_tokens=m[R.ROUTING_UNPAIRED_TOKENS],
    )
    if share is None or flipped is None or not same:
        return NA, "no paired tokens on both sides of a flip", evidence
    ratio = flipped / same
    layers = m[R.ROUTING_LAYER_AGREEMENT]
    rate = 1.0 - layers if layers is not None else 0.0
    evidence = dataclasses.replace(evidence, flipped_same_ratio=ratio, layer_flip_rate=rate)
    text = (
        f"routing flips carry {pct(share)} of the mismatch (K3 of tokens after a flipped "
        f"position {ratio:.2g}x that of the others; token agreement "
        f"{pct(m[R.ROUTING_TOKEN_AGREEMENT])}, {pct(rate)} of the layer routes flipped)"
    )
    if route_capture.capture_signature(m, ratio):
        return OK, text + ": too many flips for the little they carry, see route_capture", evidence
    if ratio < T.ROUTING_RATIO_WARN or share < T.ROUTING_SHARE_WARN:
        return OK, text, evidence
    if rate < T.FLIP_RATE_WARN:
        return OK, text + (
            f": no more flips than bf16 numerics make (under {pct(T.FLIP_RATE_WARN)} of the "
            "layer routes), the normal state of an MoE without replay; rollout routing replay "
            "(R3) would roughly halve the mismatch"
        ), evidence  # fmt: skip
    fail = share >= T.ROUTING_SHARE_FAIL and rate >= T.FLIP_RATE_FAIL
    return (FAIL if fail else WARN), text, evidence
