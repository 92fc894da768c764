"""The turns' last tokens: how each side handles the stop (the end-of-sequence token, a stop
string, the tool-call close before a tool response). Read from the ``turn_edges`` pass
(``analysis/turn_edges.py``: a cube of every turn by the distance from its last model token and
the probability bin)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mismatchctl.analysis.diagnose.advice import STOP_ADVICE
from mismatchctl.analysis.diagnose.check import (
    DATA,
    FAIL,
    NA,
    OK,
    SEVERITY,
    Check,
    CheckEvidence,
    absent,
    advice_if,
    fired,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.contrasts import (
    Ratio,
    RatioRow,
    ratio_part,
    ratio_row,
    relative,
)
from mismatchctl.analysis.diagnose.levels import LEVEL, LOCAL_CI_LOW, LOCAL_FACTOR, LOCAL_FAIL
from mismatchctl.analysis.diagnose.runs import WorstRun, worst_run
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.analysis.turn_edges import FINAL, SCOPE
from mismatchctl.engines import plan as K
from mismatchctl.stats.cube.cube import Cube, Field
from mismatchctl.stats.localize.explain import contrast, contrast_within

NAME = "turn_ends"
LAYER = DATA
TITLE = "The last token of each turn (stop handling)"
ORDER = 110
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    """The turns' last token is judged as a localized part (``levels``: ``LOCAL_FACTOR``,
    ``LOCAL_CI_LOW`` and ``LOCAL_FAIL``) on its contrast with every other token at the same
    token probabilities, and the same pattern on its contrast with the seven tokens before it
    in the same turns, at ``STOP_SHARP`` or more. The responses' last token alone is judged the
    same way (the turns ending before a tool response dilute an end-of-sequence fault)."""

    STOP_SHARP: float = 10.0
    """The last token's rate over the seven before it that a stop fault makes: a stop handled
    differently replaces the logprob of one token (a 0.0 fill, a token the engine never sampled,
    another processing of the end-of-sequence or stop-string token), not the numerics of its
    neighbours. The calibration corpora's nine physical stop faults (both draws: ``stop-*``)
    put it at 100-3178x (the interval's low end 82 or more); the code paths whose ends are hot
    (the small decode batches at the end of generation, a mismatch growing with the KV
    position) at 1.8-5.1x: ``cp-batchvar-subtle`` 5.1x (interval 1.4-18; the ends 6.7x the
    rest), ``combo-stale-splitkv-mid`` 3.1x, ``cp-splitkv-loud`` 2.7x, the sample
    ``faulty-attn`` 1.8x. A stop fault doubling a run's K3 makes its ends tens of times the
    rest (they are one token in 20-70) and as much their neighbours; scaled plants of 2-3x at
    the last token (a K3 of 4-9x) sit under it and have no physical counterpart."""

    END_CARRIERS: float = 6.0
    """The last tokens' K3 must be carried by this many responses or more (``(sum y)^2 / sum
    y^2``, ``y`` each response's K3 at its turns' last token: the number of equal responses
    that would hold it): a stop handled differently replaces the logprob of every stop alike.
    One step of the Cohere member's healthy runs (32 responses) put two or four of its largest
    |r| on turn ends (0.43 and 0.31 nats where the ends' typical is 0.03): the turns' ends 35x
    the other tokens (95% CI 8.9-137) and 43x the seven before, carried by 2.1 responses, and
    the responses' ends 12x (4.8-28) by 4.7: the stop was named. Every stop fault of every
    corpus is carried by 25-198 responses on its whole run, 9.3-20 on one of its steps."""

    FILLED_ENDS: float = 0.05
    FILLED_FACTOR: float = 10.0
    """The stop's logprob filled in on one side: this share of the turns' last tokens or more
    exactly 0.0 on one side where the other gives p <= 0.5 (``stats.sentinels``' counts,
    ``end_zeros``), and ``FILLED_FACTOR`` times the share of the other tokens that are, fails
    whatever the contrasts say. The contrasts compare the ends with the tokens at the same
    token probabilities, and a 0.0 puts a token in the top bin (p >= 0.99): on a model whose
    distributions are flat (the family's Cohere member, a mean sampled probability of 0.11)
    the filled stops make up most of that bin and are compared with themselves (1.0x), and the
    stop was named `semantics`, `unexplained` or a precision loss in three draws. Every stop
    fault of every corpus fills 8.6-74% of the turns' ends this way and no other token (under
    0.001%); every other run 0.2% at most, but for a side far sharper everywhere
    (``f-u-logit-scale-off``: 16% of the ends and 15% of the other tokens, 1.1 times). A
    writer's shift of one side (``data-shift``: 44-49%) is the data's, named before."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class ResponseEnd(CheckEvidence):
    """The responses' last token alone: against every other token and against the seven
    before it, its tokens and share of the K3 mass."""

    last: RatioRow | None
    last_vs_before: RatioRow | None
    tokens: int
    mass_share: float | None
    carriers: float | None = None


@dataclass(frozen=True, kw_only=True)
class Ends(CheckEvidence):
    """One run's last token of every turn against every other token at the same token
    probabilities (``last``), the last four (``last_4``), the last against the seven before it
    (``last_vs_before``), its tokens and share of the K3 mass, the responses that carry that
    K3 (``last_carriers``: ``END_CARRIERS``); the responses' last token alone
    (written when some turns end before a tool response); ``scope``: which of the two is
    judged at fault (None: neither)."""

    last: RatioRow | None
    last_4: RatioRow | None
    last_vs_before: RatioRow | None
    last_tokens: int
    last_mass_share: float | None
    last_carriers: float | None = None
    response_end: ResponseEnd | None = absent()
    scope: str | None


@dataclass(frozen=True, kw_only=True)
class Evidence(WorstRun[Ends]):
    """The worst run's turn ends (and with several runs every run's, ``runs``); ``filled``:
    the selection's turns whose last token one side fills with 0.0 (written when any token
    is such a zero, ``filled_ends``)."""

    filled: FilledEnds | None = absent()


def run(ctx: Context) -> Check:
    """The last token of every turn against the other tokens at the same token probabilities,
    and against the seven before it in the same turns (both must show the localized pattern:
    a stop handled differently hits the last token alone, a mismatch that grows with the KV
    position or in the small decode batches at the end of generation also makes the tokens
    before it hot); the same for the responses' last token alone (an end-of-sequence fault,
    which the turns ending before a tool response would dilute); the last four as evidence.
    Run by run (the worst run's verdict; with several, evidence ``runs``)."""
    st = ctx.edges
    runs = {run: _judge(cube) for run, cube in sorted((st.ends if st else {}).items())}
    runs = {run: found for run, found in runs.items() if found is not None}
    if not runs:
        return Check(LAYER, NAME, TITLE, NA, "no model token to look at")
    verdict, finding, evidence = worst_run(runs, Evidence)
    filled = filled_ends(ctx)
    if filled is not None:
        evidence = dataclasses.replace(evidence, filled=filled)
        if filled.filled:
            verdict = FAIL
            finding += (
                f"; {filled.ends_filled} of {filled.ends} turns ({pct(filled.share)}) end in a "
                "token exactly 0.0 on one side where the other gives p <= 0.5, against "
                f"{pct(filled.other_share)} of the other tokens: the stop's logprob filled in"
            )
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence,
                 advice_if(verdict, STOP_ADVICE))  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class FilledEnds(CheckEvidence):
    """The turns, those whose last token is one side's exact 0.0 with the other side's p <= 0.5
    and their share, the same share among the other tokens, and whether the stop is filled
    (``FILLED_ENDS``, ``FILLED_FACTOR``)."""

    ends: int
    ends_filled: int
    share: float
    other_share: float
    filled: bool


def filled_ends(ctx: Context) -> FilledEnds | None:
    """The selection's turn ends filled with 0.0 (``stats.sentinels``' counts); None without
    any such token."""
    s = ctx.state.sentinels
    if not s.turn_ends or not (s.end_zeros or s.other_zeros):
        return None
    share = s.end_zeros / s.turn_ends
    others = s.tokens - s.turn_ends
    other = s.other_zeros / others if others > 0 else 0.0
    filled = share >= T.FILLED_ENDS and share >= T.FILLED_FACTOR * other
    return FilledEnds(ends=s.turn_ends, ends_filled=s.end_zeros, share=share,
                      other_share=other, filled=filled)  # fmt: skip


def _judge(ends: Cube) -> tuple[str, str, Ends] | None:
    """One run's verdict, sentence and evidence (None: no token)."""
    if ends.tokens == 0:
        return None
    every = _scope(ends, {})
    tail = contrast(ends, {FINAL: [0, 1, 2]}, K.BIN, LEVEL)
    response_end = None
    finding = (
        f"the last token of each turn: {ratio_part(every.last)} the other tokens at the same "
        f"token probabilities, {ratio_part(every.near)} the 7 before it; the last 4: "
        f"{ratio_part(tail)}"
    )
    scopes = [("every turn", every)]
    if ends.table([SCOPE])[0, Field.TOKENS] > 0:  # some turns end before a tool response
        final = _scope(ends, {SCOPE: [1]})
        response_end = ResponseEnd(
            last=ratio_row(final.last),
            last_vs_before=ratio_row(final.near),
            tokens=final.tokens,
            mass_share=final.mass / ends.k3_sum if ends.k3_sum > 0 else None,
            carriers=final.carriers,
        )
        finding += (
            f"; the responses' last token: {ratio_part(final.last)} the rest, "
            f"{ratio_part(final.near)} the 7 before it"
        )
        scopes.append(("end of the response", final))
    verdict, name = OK, None
    for label, found in scopes:
        if SEVERITY[found.verdict] > SEVERITY[verdict]:
            verdict, name = found.verdict, label
    evidence = Ends(
        last=ratio_row(every.last),
        last_4=ratio_row(tail),
        last_vs_before=ratio_row(every.near),
        last_tokens=every.tokens,
        last_mass_share=every.mass / ends.k3_sum if ends.k3_sum > 0 else None,
        last_carriers=every.carriers,
        response_end=response_end,
        scope=name,
    )
    if verdict != OK:
        where = "the turns' last token" if name == "every turn" else "the responses' last token"
        finding += f": {where}, the stop handled differently on the two sides"
    elif few := [found for _, found in scopes if found.few]:
        finding += (
            f": the ends are hot, but their K3 is carried by about {few[0].carriers:.1f} "
            f"responses (under {T.END_CARRIERS:g}): a few heavy tokens, where a stop handled "
            "differently moves every stop alike"
        )
    elif any(found.hot for _, found in scopes):
        finding += (
            f": the ends are hot, but under {T.STOP_SHARP:g}x the tokens just before them (a "
            "mismatch growing with the position or in the small batches at the end of "
            "generation is not the stop)"
        )
    return verdict, finding, evidence


@dataclass
class Scope:
    """The last tokens of some turns: against every other token, against the seven before them
    in the same turns, their tokens and K3 mass, and the verdict (both contrasts at the
    localized pattern); ``hot``: the first contrast alone is."""

    last: Ratio
    near: Ratio
    tokens: int
    mass: float
    verdict: str
    hot: bool
    carriers: float | None
    few: bool  # hot and sharp, but carried by under ``END_CARRIERS`` responses


def _scope(ends: Cube, scope: dict[str, list[int]]) -> Scope:
    last = contrast(ends, {FINAL: [0], **scope}, K.BIN, LEVEL)
    near = contrast_within(ends, {FINAL: [0, 1, 2, 3], **scope}, FINAL, [0], K.BIN, LEVEL)
    t = ends.table([FINAL, SCOPE])
    rows = t[0] if not scope else t[0, scope[SCOPE]]
    n, a = float(rows[..., Field.TOKENS].sum()), float(rows[..., Field.K3].sum())
    yy = float(rows[..., Field.YY].sum())  # each response's K3 at its turns' last token, squared
    carriers = a * a / yy if yy > 0 else None
    hot = last is not None and _pattern(last, a / n if n else None) != OK
    sharp = near is not None and near[0] >= T.STOP_SHARP and _pattern(near, None) != OK
    many = carriers is None or carriers >= T.END_CARRIERS
    verdict = _pattern(last, a / n if n else None) if hot and sharp and many else OK
    return Scope(last, near, int(n), a, verdict, hot, carriers, hot and sharp and not many)


def _pattern(found: Ratio, level: float | None) -> str:
    if found is None:
        return OK
    return relative(found[0], found[1], LOCAL_FACTOR, LOCAL_CI_LOW, LOCAL_FAIL, level)


def ends_fault(ctx: Context) -> bool:
    """This check found the mismatch at the turns' last token (the stop): for the checks that
    read it."""
    return fired(ctx.result(NAME))
