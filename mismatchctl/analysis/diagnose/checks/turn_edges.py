"""Template or numerics: where the mismatch sits relative to the turn edges, which tells a
chat-template or rendering fault from engine numerics (``analysis/turn_edges.py`` reads what it
needs)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mismatchctl.analysis.diagnose.advice import TEMPLATE_ADVICE
from mismatchctl.analysis.diagnose.check import DATA, NA, OK, Check, CheckEvidence, advice_if, fired
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.contrasts import (
    Ratio,
    RatioRow,
    ratio_part,
    ratio_row,
    relative,
)
from mismatchctl.analysis.diagnose.levels import LEVEL
from mismatchctl.analysis.turn_edges import (
    EDGE_CLASSES,
    EDGE_TOKENS,
    END,
    START,
    START_EDGES,
    EdgeState,
    TopShare,
    start_labels,
    top_shares,
)
from mismatchctl.engines import plan as K
from mismatchctl.stats.cube.cube import Cube, Field
from mismatchctl.stats.localize.explain import contrast

NAME = "turn_edges"
LAYER = DATA
TITLE = "Template or numerics: the mismatch at turn edges"
ORDER = 100
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    EDGE_FACTOR: float = 1.5
    """The first ``EDGE_TOKENS`` (8) tokens of the turns after a tool response against the rest
    of those turns, at the same token probabilities: twice the rate with the interval's low end
    at ``EDGE_CI_LOW`` is a turn-start pattern (the relative-finding rule of ``levels``;
    ``LOCAL_FACTOR``'s reasoning: 2x is the smallest fault we know and above healthy drift). It
    names a rendering fault only when the first turns' own starts are not hot (their ratio's
    interval low end below ``EDGE_CI_LOW``, or the later turns' ratio at least ``EDGE_FACTOR``
    times theirs): engine numerics and the natural uncertainty of a response's first tokens
    touch every turn alike."""

    EDGE_CI_LOW: float = 1.25
    """The interval's low end of a turn-start pattern (``EDGE_FACTOR``)."""

    EDGE_FAIL: float = 10.0
    """The interval's low end a decade above the rest of the turns: fail."""

    TOP_SHARE: float = 0.01
    TOP_LEAST: int = 50
    """The largest-|r| tokens whose place is counted: the top 1% of the selection's tokens (at an
    |r| histogram boundary, so at least that many), and at least ``TOP_LEAST``."""

    TOP_ENRICHMENT: float = 1.25
    TOP_Z: float = 3.0
    """A rendering fault also puts the largest-|r| tokens of the later turns at their starts: at
    least 1.25 times as many as chance would at the same token probabilities, ``TOP_Z`` standard
    errors above it (a count, robust to the few heavy sequences that can make a K3 ratio of a
    small cell look hot, such as a spike step's, which put no more of them at the starts than
    elsewhere), and the turn starts (distances 0-7) at least as hot as the eight tokens after
    them (8-15): the mismatch decays with the distance from the tool response (``NEXT_CLASSES``).
    Within the first eight it need not fall: which of a turn's opening tokens a changed context
    moves most depends on the text. ``tpl-strip-newline`` (the corpus regenerated on a second
    machine) has distances 0-1 at 4-6x, 2-3 at 0.4x, 4-7 at 3.0x and 8-15 at 0.4x;
    ``combo-topp-template-mid`` (a loud top-p beside the \\r\\n fault) 1.7, 1.6, 1.0, 1.5,
    then 1.0, in both draws: the first half against the second within the eight misread both.
    A few heavy sequences are as hot at 8-15 as before. A fault tripling the
    first token's K3 and fading over a few tokens (1.6x over the first 8, as ``EDGE_FACTOR``
    asks) puts about 1.3x as many there: at 1.5x such faults were passed (the factors' rule of
    ``levels``: below the signature of the smallest fault, ``TOP_Z`` keeping chance out)."""


T = Thresholds()

NEXT_CLASSES = [k for k, lo in enumerate(START_EDGES) if EDGE_TOKENS <= lo < 2 * EDGE_TOKENS]
"""The distance classes of the eight tokens after the turn starts (8-15): the decay's control."""


@dataclass(frozen=True, kw_only=True)
class ProfileRow(CheckEvidence):
    """A distance from the turn start: its tokens and K3 rate over the cube's at the same token
    probabilities (None: no token)."""

    distance: str
    tokens: int
    rate_ratio: float | None


@dataclass(frozen=True, kw_only=True)
class TopRow(CheckEvidence):
    """The largest-|r| tokens of some turns: how many, how many sit at the turn starts, how
    many chance puts there, and the ratio (None: not finite)."""

    top: int
    at_edge: int
    expected: float
    enrichment: float | None


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """The first ``edge_tokens`` tokens after a tool response against the rest of those turns
    at the same token probabilities (``later_start``), their share of the K3 mass, the first
    turns' starts (``first_start``, the control), the last tokens before a tool response
    (``end_before_tool``, reported beside); the rate by distance from the start in both kinds of
    turn; the largest-|r| tokens at the starts (``top_share``: first and later turns); whether
    the mismatch decays with the distance, whether the largest-|r| tokens crowd at the starts,
    and whether that is a template fault."""

    edge_tokens: int
    later_start: RatioRow | None
    edge_mass_share: float
    first_start: RatioRow | None
    end_before_tool: RatioRow | None
    profile_later: list[ProfileRow]
    profile_first: list[ProfileRow]
    top_share: dict[str, TopRow]
    decays: bool
    top_crowded: bool
    template: bool


def run(ctx: Context) -> Check:
    """The first tokens after each tool response against the rest of those turns, at the same
    token probabilities, with the first turns as the control, the count of the largest-|r|
    tokens there, and the decay with the distance; the last tokens before a tool response
    against the rest are reported beside (evidence, not a verdict)."""
    st: EdgeState | None = ctx.edges
    if st is None or st.cubes[1].tokens == 0:
        return Check(LAYER, NAME, TITLE, NA, "no turn after a tool response to look at")
    first, later = st.cubes
    at_start = {START: EDGE_CLASSES}
    later_start, first_start = _contrast(later, at_start), _contrast(first, at_start)
    end = _contrast(first.merge(later), {END: [1]})
    tops = top_shares(st.hist, T.TOP_SHARE, T.TOP_LEAST)
    level = _level(later, EDGE_CLASSES)
    v_start = _grade(later_start, level)
    first_hot = _hot(first_start, later_start)
    decays = _standardized(later, EDGE_CLASSES) >= _standardized(later, NEXT_CLASSES)
    crowded = _crowded(tops["later"])
    template = v_start != OK and not first_hot and crowded and decays
    evidence = Evidence(
        edge_tokens=EDGE_TOKENS,
        later_start=ratio_row(later_start),
        edge_mass_share=_mass(later, EDGE_CLASSES) / (_mass(first) + _mass(later) or math.nan),
        first_start=ratio_row(first_start),
        end_before_tool=ratio_row(end),
        profile_later=profile(later),
        profile_first=profile(first),
        top_share={k: _top_row(t) for k, t in tops.items()},
        decays=decays,
        top_crowded=crowded,
        template=template,
    )
    verdict = v_start if template else OK
    finding = _finding(later_start, first_start, end, tops["later"], template, first_hot)
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence,
                 advice_if(verdict, TEMPLATE_ADVICE))  # fmt: skip


def template_fault(ctx: Context) -> bool:
    """This check found the mismatch at the turn edges (a rendering fault): for the checks that
    read it."""
    return fired(ctx.result(NAME))


def _contrast(cube: Cube, region: dict[str, list[int]]) -> Ratio:
    return contrast(cube, region, K.BIN, LEVEL) if cube.tokens else None


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


def _mass(cube: Cube, classes: list[int] | None = None) -> float:
    """The K3 mass of these distance classes (every class: the cube's)."""
    a = cube.table([START])[:, Field.K3]
    return float(a.sum() if classes is None else a[classes].sum())


def _level(cube: Cube, classes: list[int]) -> float | None:
    """The region's own vllm_kl (its K3 mass over its tokens)."""
    t = cube.table([START])
    n, a = t[classes, Field.TOKENS].sum(), t[classes, Field.K3].sum()
    return float(a / n) if n else None


def profile(cube: Cube) -> list[ProfileRow]:
    """The K3 rate of each distance from the turn start over the whole cube's, at the same
    token probabilities (direct standardization over the probability bins)."""
    n = cube.table([START])[:, Field.TOKENS]
    return [
        ProfileRow(
            distance=label,
            tokens=int(n[c]),
            rate_ratio=_standardized(cube, [c]) if n[c] else None,
        )
        for c, label in enumerate(start_labels())
    ]


def _top_row(t: TopShare) -> TopRow:
    e = t.enrichment
    return TopRow(top=t.top, at_edge=t.at_edge, expected=t.expected,
                  enrichment=e if math.isfinite(e) else None)  # fmt: skip


def _finding(
    later: Ratio, first: Ratio, end: Ratio, top: TopShare, template: bool, first_hot: bool
) -> str:
    text = (
        f"the first {EDGE_TOKENS} tokens after a tool response: {ratio_part(later)} the rest of "
        f"those turns at the same token probabilities; first turns' first {EDGE_TOKENS}: "
        f"{ratio_part(first)}; last {EDGE_TOKENS} before a tool response: {ratio_part(end)}"
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
