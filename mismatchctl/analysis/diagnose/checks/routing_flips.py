"""MoE routing flips carrying the mismatch: the K3 of tokens produced by a position whose routes
differ on the two sides against the rest, in runs without replay. No check at all for a
selection without routes."""

from __future__ import annotations

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
    CheckModule,
    advice_if,
    worst,
)
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.stats import routing as R

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
    mismatch, rollout routing replay is the fix (a conservative choice)."""


T = Thresholds()


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
    evidence = {"runs": {run: e for run, (_, _, e) in results.items()}}
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice_if(verdict, REPLAY_ADVICE))


def _flips(m: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    share, flipped, same = (
        m[R.ROUTING_K3_SHARE_FLIPPED],
        m[R.VLLM_KL_FLIPPED],
        m[R.VLLM_KL_SAME],
    )
    evidence = {
        k: m[k]
        for k in (
            R.ROUTING_TOKEN_AGREEMENT,
            R.VLLM_KL_FLIPPED,
            R.VLLM_KL_SAME,
            R.ROUTING_K3_SHARE_FLIPPED,
            R.ROUTING_UNPAIRED_TOKENS,
        )
    }
    if share is None or flipped is None or not same:
        return NA, "no paired tokens on both sides of a flip", evidence
    ratio = flipped / same
    evidence["flipped_same_ratio"] = ratio
    text = (
        f"routing flips carry {pct(share)} of the mismatch (K3 of tokens after a flipped "
        f"position {ratio:.2g}x that of the others; token agreement "
        f"{pct(m[R.ROUTING_TOKEN_AGREEMENT])})"
    )
    if ratio < T.ROUTING_RATIO_WARN or share < T.ROUTING_SHARE_WARN:
        return OK, text, evidence
    return (FAIL if share >= T.ROUTING_SHARE_FAIL else WARN), text, evidence
