"""The data-integrity check of the turns' last tokens: how each side handles the stop (the
end-of-sequence token, a stop string, the tool-call close before a tool response). Read from
the ``turn_edges`` pass (``analysis/turn_edges.py``: a cube of every turn by the distance from
its last model token and the probability bin)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mismatchctl.analysis import diagnose_thresholds as T
from mismatchctl.analysis.diagnose_base import (
    DATA,
    NA,
    OK,
    SEVERITY,
    Check,
    Context,
    advice_if,
    ci_text,
    relative,
    worst_run,
)
from mismatchctl.analysis.turn_edges import FINAL, SCOPE
from mismatchctl.engines import plan as K
from mismatchctl.stats.cube import Cube, Field
from mismatchctl.stats.localize import contrast, contrast_within
from mismatchctl.stats.localize_result import ratio_text

STOP_ADVICE = (
    "the last token of each turn carries the mismatch: how the two sides handle the stop: the "
    "logprob the engine returns for the end-of-sequence or stop-string token (after a stop "
    "string, processed or raw), whether the trainer scores that token with the same mask and "
    "template (an end-of-turn token the chat template appends that the engine never sampled), "
    "the tool-call close before a tool response; compare the last token ids and logprobs of a "
    "few turns on both sides (`mismatchctl show`); a correction would only reweight it"
)

Ratio = tuple[float, tuple[float, float]] | None


def turn_ends(ctx: Context) -> Check:
    """The last token of every turn against the other tokens at the same token probabilities,
    and against the seven before it in the same turns (both must show the localized pattern:
    a stop handled differently hits the last token alone, a mismatch that grows with the KV
    position or in the small decode batches at the end of generation also makes the tokens
    before it hot); the same for the responses' last token alone (an end-of-sequence fault,
    which the turns ending before a tool response would dilute); the last four as evidence.
    Run by run (the worst run's verdict; with several, evidence ``runs``)."""
    title = "The last token of each turn (stop handling)"
    st = ctx.edges
    runs = {run: _judge(cube) for run, cube in sorted((st.ends if st else {}).items())}
    runs = {run: found for run, found in runs.items() if found is not None}
    if not runs:
        return Check(DATA, "turn_ends", title, NA, "no model token to look at")
    verdict, finding, evidence = worst_run(runs)
    return Check(DATA, "turn_ends", title, verdict, finding, evidence,
                 advice_if(verdict, STOP_ADVICE))  # fmt: skip


def _judge(ends: Cube) -> tuple[str, str, dict[str, Any]] | None:
    """One run's verdict, sentence and evidence (None: no token)."""
    if ends.tokens == 0:
        return None
    every = _scope(ends, {})
    tail = contrast(ends, {FINAL: [0, 1, 2]}, K.BIN, T.LEVEL)
    evidence: dict[str, Any] = {
        "last": _row(every.last),
        "last_4": _row(tail),
        "last_vs_before": _row(every.near),
        "last_tokens": every.tokens,
        "last_mass_share": every.mass / ends.k3_sum if ends.k3_sum > 0 else None,
    }
    finding = (
        f"the last token of each turn: {_part(every.last)} the other tokens at the same token "
        f"probabilities, {_part(every.near)} the 7 before it; the last 4: {_part(tail)}"
    )
    scopes = [("every turn", every)]
    if ends.table([SCOPE])[0, Field.TOKENS] > 0:  # some turns end before a tool response
        final = _scope(ends, {SCOPE: [1]})
        evidence["response_end"] = {
            "last": _row(final.last), "last_vs_before": _row(final.near), "tokens": final.tokens
        }  # fmt: skip
        finding += (
            f"; the responses' last token: {_part(final.last)} the rest, {_part(final.near)} "
            "the 7 before it"
        )
        scopes.append(("end of the response", final))
    verdict, name = OK, None
    for label, found in scopes:
        if SEVERITY[found.verdict] > SEVERITY[verdict]:
            verdict, name = found.verdict, label
    evidence["scope"] = name
    if verdict != OK:
        where = "the turns' last token" if name == "every turn" else "the responses' last token"
        finding += f": {where}, the stop handled differently on the two sides"
    elif any(found.hot for _, found in scopes):
        finding += (
            ": the ends are hot, but not clearly more than the tokens just before them (a "
            "mismatch growing with the position is not the stop)"
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


def _scope(ends: Cube, scope: dict[str, list[int]]) -> Scope:
    last = contrast(ends, {FINAL: [0], **scope}, K.BIN, T.LEVEL)
    near = contrast_within(ends, {FINAL: [0, 1, 2, 3], **scope}, FINAL, [0], K.BIN, T.LEVEL)
    t = ends.table([FINAL, SCOPE])
    rows = t[0] if not scope else t[0, scope[SCOPE]]
    n, a = float(rows[..., Field.TOKENS].sum()), float(rows[..., Field.K3].sum())
    hot = last is not None and _pattern(last, a / n if n else None) != OK
    sharp = near is not None and _pattern(near, None) != OK
    verdict = _pattern(last, a / n if n else None) if hot and sharp else OK
    return Scope(last, near, int(n), a, verdict, hot)


def _pattern(found: Ratio, level: float | None) -> str:
    if found is None:
        return OK
    return relative(found[0], found[1], T.LOCAL_FACTOR, T.LOCAL_CI_LOW, T.LOCAL_FAIL, level)


def _part(found: Ratio) -> str:
    return "n/a" if found is None else f"{ratio_text(found[0])}x ({ci_text(found[1])})"


def _row(found: Ratio) -> dict[str, Any] | None:
    return None if found is None else {"rate_ratio": found[0], "rate_ratio_ci": list(found[1])}


__all__ = ["STOP_ADVICE", "turn_ends"]
