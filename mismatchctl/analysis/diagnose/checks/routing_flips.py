"""MoE routing flips carrying the mismatch: the K3 of tokens produced by a position whose routes
differ on the two sides against the rest, in runs without replay, and the flips against a
baseline's. No check at all for a selection without routes.

Every MoE without replay flips some routes, and its flipped tokens carry most of its K3: that is
its normal state, and how many routes flip depends on the model (its experts, top-k, depth and
router), so a run alone raises no alarm, only a note; the rate is judged against a baseline run
of the same model without replay."""

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
    mismatch, rollout routing replay is the fix (with ``FLIP_EXCESS_FAIL``)."""

    FLIP_EXCESS_WARN: float = 2.0
    """...and the run flips at least twice the share of (token, layer) routes its baseline
    flips (a baseline with routes and without replay). Every MoE without replay has flips
    carrying most of its K3 (healthy runs: 68-78% at 40-96x the other tokens' rate), so that
    alone is not a fault; and the rate of a healthy run is the model's own: the sample MoE (8
    experts, top-2) flips 0.8% of its layer routes, the Qwen2-MoE family (16 experts, top-4)
    1.9%, its 6-layer shape with 32 experts and top-8 4.1%, a 48-layer MoE about 10% (the R3
    paper's Qwen3-30B-A3B). A fixed rate (1.5%) warned on 10 of the 14 healthy or improved
    diagnoses of each of the family's three draws (none now). Against their baselines, healthy
    runs flip 0.92-1.13x; a router in fp8 3.8-4.0x (e4m3) and 7.4x (e5m2); an fp8 KV cache
    3.4x and the off-by-one split-KV merge 2.3x flip routes too (their perturbed activations
    reach the routers: the flips are then a symptom, their own causes compete by the excess
    they explain); weights an RL step behind 10x."""

    FLIP_EXCESS_FAIL: float = 3.0
    """Routes flipping at 3x the baseline's or more with ``ROUTING_SHARE_FAIL``: fail."""


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
    baseline_flip_rate: float | None = absent()
    flip_excess: float | None = absent()  # None too when the baseline flips none (it replays)


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """Each run's flips (``runs``: the runs without replay)."""

    runs: dict[str, Flips]


def run(ctx: Context) -> Check | None:
    """Runs without replay: the K3 of tokens produced by flipped positions against the rest, and
    their flip rate against the baseline's (no alarm without one)."""
    runs = {r: x for r, x in ctx.report.routing.items() if not x.replay}
    if not runs:
        return None
    base = baseline_flip_rate(ctx)
    results = {run: _flips(x.metrics, base, x.partial.alignment()) for run, x in runs.items()}
    verdict = worst([v for v, _, _ in results.values()])
    shown = [run for run, (v, _, _) in results.items() if v == verdict]
    many = len(results) > 1
    finding = "; ".join((f"{run}: " if many else "") + results[run][1] for run in shown[:3])
    evidence = Evidence(runs={run: e for run, (_, _, e) in results.items()})
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice_if(verdict, REPLAY_ADVICE))


def baseline_flip_rate(ctx: Context) -> float | None:
    """The share of the baseline's (token, layer) routes that flip (0 when it replays them);
    None without a baseline with routes."""
    theirs = ctx.baseline.routing if ctx.baseline is not None else None
    agree = theirs.get(R.ROUTING_LAYER_AGREEMENT) if theirs else None
    return None if agree is None else max(0.0, 1.0 - float(agree))


def _flips(
    m: dict[str, Any], base: float | None, shifted: dict[str, float | None]
) -> tuple[str, str, Flips]:
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
    excess = rate / base if base else None
    replayed = base == 0.0  # the baseline replays its routes: every flip is the run's own
    evidence = dataclasses.replace(
        evidence,
        flipped_same_ratio=ratio,
        layer_flip_rate=rate,
        baseline_flip_rate=base,
        flip_excess=excess,
    )
    text = (
        f"routing flips carry {pct(share)} of the mismatch (K3 of tokens after a flipped "
        f"position {ratio:.2g}x that of the others; token agreement "
        f"{pct(m[R.ROUTING_TOKEN_AGREEMENT])}, {pct(rate)} of the layer routes flipped"
        + (f", {excess:.2g}x the baseline's {pct(base)})" if excess is not None else "")
        + (", none in the baseline, which replays its routes)" if replayed else "")
        + (")" if excess is None and not replayed else "")
    )
    if route_capture.capture_signature(m, shifted):
        return OK, text + ": the routes are unrelated, see route_capture", evidence
    if ratio < T.ROUTING_RATIO_WARN or share < T.ROUTING_SHARE_WARN:
        return OK, text, evidence
    if replayed:  # what replay removes: the baseline's own remedy
        return (FAIL if share >= T.ROUTING_SHARE_FAIL else WARN), text, evidence
    if excess is None:
        return OK, text + (
            ": the normal state of an MoE without replay (rollout routing replay, R3, would "
            "remove most of the flipped tokens' share of the mismatch); how many routes flip is "
            "the model's own: give --baseline a healthy run of the same model without replay "
            "to judge the rate"
        ), evidence  # fmt: skip
    if excess < T.FLIP_EXCESS_WARN:
        return OK, text + (
            ": no more flips than the baseline's numerics make, the normal state of an MoE "
            "without replay; rollout routing replay (R3) would remove most of the flipped "
            "tokens' share of the mismatch"
        ), evidence  # fmt: skip
    fail = share >= T.ROUTING_SHARE_FAIL and excess >= T.FLIP_EXCESS_FAIL
    return (FAIL if fail else WARN), text, evidence
