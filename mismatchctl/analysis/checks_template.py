"""The data-integrity check that tells a chat-template or rendering fault from engine numerics:
where the mismatch sits relative to the turn edges (``analysis/turn_edges.py`` reads what it
needs; thresholds in ``diagnose_thresholds``: "template or numerics")."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mismatchctl.analysis import diagnose_thresholds as T
from mismatchctl.analysis.diagnose_base import (
    DATA,
    NA,
    OK,
    Check,
    Context,
    advice_if,
    ci_text,
    relative,
)
from mismatchctl.analysis.turn_edges import (
    EDGE_CLASSES,
    EDGE_TOKENS,
    END,
    START,
    EdgeState,
    TopShare,
    start_labels,
    top_shares,
)
from mismatchctl.engines import plan as K
from mismatchctl.stats.cube import Cube, Field
from mismatchctl.stats.localize import contrast
from mismatchctl.stats.localize_result import ratio_text

Ratio = tuple[float, tuple[float, float]] | None

TEMPLATE_ADVICE = (
    "a chat-template or rendering fault: the trainer's context around tool responses is not the "
    "one the engine sampled from (a re-rendered tool response, another chat template or version, "
    "special tokens, whitespace or a re-tokenization of the text instead of the engine's token "
    "ids); compare both sides' token ids at the start of the turns after a tool response. No "
    "importance correction fixes a different context"
)


def turn_edges(ctx: Context) -> Check:
    """The first tokens after each tool response against the rest of those turns, at the same
    token probabilities, with the first turns as the control, the count of the largest-|r|
    tokens there, and the decay with the distance; the last tokens before a tool response
    against the rest are reported beside (evidence, not a verdict)."""
    title = "Template or numerics: the mismatch at turn edges"
    st: EdgeState | None = ctx.edges
    if st is None or st.cubes[1].tokens == 0:
        return Check(DATA, "turn_edges", title, NA, "no turn after a tool response to look at")
    first, later = st.cubes
    at_start = {START: EDGE_CLASSES}
    later_start, first_start = _contrast(later, at_start), _contrast(first, at_start)
    end = _contrast(first.merge(later), {END: [1]})
    tops = top_shares(st.hist, T.TOP_SHARE, T.TOP_LEAST)
    level = _level(later, EDGE_CLASSES)
    v_start = _grade(later_start, level)
    first_hot = _hot(first_start, later_start)
    decays = _standardized(later, EDGE_CLASSES[:-1]) >= _standardized(later, EDGE_CLASSES[-1:])
    crowded = _crowded(tops["later"])
    template = v_start != OK and not first_hot and crowded and decays
    evidence: dict[str, Any] = {
        "edge_tokens": EDGE_TOKENS,
        "later_start": _row(later_start),
        "first_start": _row(first_start),
        "end_before_tool": _row(end),
        "profile_later": profile(later),
        "profile_first": profile(first),
        "top_share": {k: _top_row(t) for k, t in tops.items()},
        "decays": decays,
        "top_crowded": crowded,
        "template": template,
    }
    verdict = v_start if template else OK
    finding = _finding(later_start, first_start, end, tops["later"], template, first_hot)
    return Check(DATA, "turn_edges", title, verdict, finding, evidence,
                 advice_if(verdict, TEMPLATE_ADVICE))  # fmt: skip


def template_fault(ctx: Context) -> bool:
    """The turn_edges check found the mismatch at the turn edges (a rendering fault)."""
    found = ctx.done.get("turn_edges")
    return found is not None and found.verdict not in (OK, NA)


def _contrast(cube: Cube, region: dict[str, list[int]]) -> Ratio:
    return contrast(cube, region, K.BIN, T.LEVEL) if cube.tokens else None


def _grade(found: Ratio, level: float | None) -> str:
    if found is None:
        return OK
    return relative(found[0], found[1], T.EDGE_FACTOR, T.EDGE_CI_LOW, T.EDGE_FAIL, level)


def _hot(first: Ratio, later: Ratio) -> bool:
    """The first turns' starts are hot too (then it is no tool-response rendering fault)."""
    if first is None or later is None:
        return False
    return first[1][0] >= T.EDGE_CI_LOW and later[0] < T.EDGE_FACTOR * first[0]


def _crowded(t: TopShare) -> bool:
    """More of the largest-|r| tokens at the turn starts than chance puts there (thresholds:
    ``TOP_ENRICHMENT``, ``TOP_Z``; a binomial count against its expectation)."""
    if t.top == 0 or t.expected <= 0:
        return False
    p = t.expected / t.top
    sd = math.sqrt(t.top * p * (1 - p)) or 1.0
    return t.enrichment >= T.TOP_ENRICHMENT and (t.at_edge - t.expected) / sd >= T.TOP_Z


def _standardized(cube: Cube, classes: list[int]) -> float:
    """The K3 rate of these distance classes over the cube's, at the same token probabilities
    (0 when they hold no token)."""
    t = cube.table([START, K.BIN])
    n, a = t[..., Field.TOKENS], t[..., Field.K3]
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(n.sum(axis=0) > 0, a.sum(axis=0) / n.sum(axis=0), 0.0)
    expected = float((n[classes] * rate).sum())
    return float(a[classes].sum() / expected) if expected > 0 else 0.0


def _level(cube: Cube, classes: list[int]) -> float | None:
    """The region's own vllm_kl (its K3 mass over its tokens)."""
    t = cube.table([START])
    n, a = t[classes, Field.TOKENS].sum(), t[classes, Field.K3].sum()
    return float(a / n) if n else None


def profile(cube: Cube) -> list[dict[str, Any]]:
    """The K3 rate of each distance from the turn start over the whole cube's, at the same
    token probabilities (direct standardization over the probability bins)."""
    n = cube.table([START])[:, Field.TOKENS]
    return [
        {
            "distance": label,
            "tokens": int(n[c]),
            "rate_ratio": _standardized(cube, [c]) if n[c] else None,
        }
        for c, label in enumerate(start_labels())
    ]


def _row(found: Ratio) -> dict[str, Any] | None:
    return None if found is None else {"rate_ratio": found[0], "rate_ratio_ci": list(found[1])}


def _top_row(t: TopShare) -> dict[str, Any]:
    e = t.enrichment
    return {"top": t.top, "at_edge": t.at_edge, "expected": t.expected,
            "enrichment": e if math.isfinite(e) else None}  # fmt: skip


def _finding(
    later: Ratio, first: Ratio, end: Ratio, top: TopShare, template: bool, first_hot: bool
) -> str:
    def part(found: Ratio) -> str:
        return "n/a" if found is None else f"{ratio_text(found[0])}x ({ci_text(found[1])})"

    text = (
        f"the first {EDGE_TOKENS} tokens after a tool response: {part(later)} the rest of those "
        f"turns at the same token probabilities; first turns' first {EDGE_TOKENS}: {part(first)}; "
        f"last {EDGE_TOKENS} before a tool response: {part(end)}"
    )
    if top.top:
        text += (
            f"; {top.at_edge} of the {top.top} largest-|r| tokens of later turns sit at their "
            f"starts, {top.expected:.0f} expected by chance"
        )
    if template:
        return text + ": the signature of a chat-template or rendering fault"
    if first_hot:
        return text + ": turn starts are hot in the first turns too, not a rendering fault"
    if _grade(later, None) != OK:
        return text + (
            ": hot on K3 but not on the count of large-|r| tokens or not decaying with the "
            "distance: a few heavy sequences, not a rendering fault"
        )
    return text


__all__ = ["TEMPLATE_ADVICE", "profile", "template_fault", "turn_edges"]
