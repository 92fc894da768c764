"""Checks of MoE routing (runs whose dumps carry routed experts on both sides; no check at all
for a selection without routes): do routing flips carry the mismatch, and does routing replay
hold when a run says it is on."""

from __future__ import annotations

from typing import Any

from mismatchctl.analysis import diagnose_thresholds as T
from mismatchctl.analysis.diagnose_base import (
    DATA,
    FAIL,
    NA,
    OK,
    PATH,
    WARN,
    Check,
    Context,
    advice_if,
    pct,
    worst,
)
from mismatchctl.stats import routing as R

REPLAY_ADVICE = (
    "enable rollout routing replay (R3: the trainer reuses the engine's routes; verl "
    "router_replay mode R3, slime/miles --use-rollout-routing-replay), then re-ingest with "
    "--tag routing_replay=r3 to check it holds"
)
BUG_ADVICE = (
    "replay is on but the trainer routes differ: a capture or alignment bug. Check the routes "
    "are aligned per input position (--routes-aligned), that padding and tool positions hold -1 "
    "and not 0 or the last row, and the ingest notes for capture bugs"
)


def routing_flips(ctx: Context) -> Check | None:
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
    title = "routing flips (MoE)"
    return Check(
        PATH, "routing_flips", title, verdict, finding, evidence, advice_if(verdict, REPLAY_ADVICE)
    )


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


def routing_replay(ctx: Context) -> Check | None:
    """Runs tagged ``routing_replay=r3``: the share of compared positions that violate it."""
    runs = {r: x for r, x in ctx.report.routing.items() if x.replay}
    if not runs:
        return None
    rows = {run: x.metrics[R.R3_VIOLATION_FRACTION] for run, x in runs.items()}
    verdicts = {
        run: NA if v is None else OK if v == 0 else FAIL if v > T.R3_VIOLATION_FAIL else WARN
        for run, v in rows.items()
    }
    verdict = worst(list(verdicts.values()))
    bad = [run for run, v in verdicts.items() if v == verdict]
    finding = "; ".join(
        f"{run}: replay is on and {100 * (rows[run] or 0):.2g}% of the compared tokens violate it"
        if verdict in (WARN, FAIL)
        else f"{run}: replay holds on every compared token"
        if verdict == OK
        else f"{run}: no compared token"
        for run in bad[:3]
    )
    evidence = {"runs": {run: {R.R3_VIOLATION_FRACTION: v} for run, v in rows.items()}}
    title = "routing replay holds (R3)"
    return Check(
        DATA, "routing_replay", title, verdict, finding, evidence, advice_if(verdict, BUG_ADVICE)
    )
