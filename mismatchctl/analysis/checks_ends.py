"""The data-integrity check of the turns' last tokens: how each side handles the stop (the
end-of-sequence token, a stop string, the tool-call close before a tool response). Read from
the ``turn_edges`` pass (``analysis/turn_edges.py``: a cube of every turn by the distance from
its last model token and the probability bin)."""

from __future__ import annotations

from typing import Any

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
from mismatchctl.analysis.turn_edges import FINAL
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
    before it hot); the last four as evidence."""
    title = "The last token of each turn (stop handling)"
    st = ctx.edges
    ends: Cube | None = None if st is None else st.ends
    if ends is None or ends.tokens == 0:
        return Check(DATA, "turn_ends", title, NA, "no model token to look at")
    last, tail = _contrast(ends, [0]), _contrast(ends, [0, 1, 2])
    near = contrast_within(ends, {FINAL: [0, 1, 2, 3]}, FINAL, [0], K.BIN, T.LEVEL)
    t = ends.table([FINAL])
    n, a = float(t[0, Field.TOKENS]), float(t[0, Field.K3])
    level = a / n if n else None
    evidence: dict[str, Any] = {
        "last": _row(last),
        "last_4": _row(tail),
        "last_vs_before": _row(near),
        "last_tokens": int(n),
        "last_mass_share": a / ends.k3_sum if ends.k3_sum > 0 else None,
    }
    verdict = OK if last is None else relative(
        last[0], last[1], T.LOCAL_FACTOR, T.LOCAL_CI_LOW, T.LOCAL_FAIL, level
    )  # fmt: skip
    sharp = near is not None and relative(
        near[0], near[1], T.LOCAL_FACTOR, T.LOCAL_CI_LOW, T.LOCAL_FAIL
    ) != OK  # fmt: skip
    finding = (
        f"the last token of each turn: {_part(last)} the other tokens at the same token "
        f"probabilities, {_part(near)} the 7 before it; the last 4: {_part(tail)}"
    )
    if verdict != OK and not sharp:
        finding += (
            ": the turns' ends are hot, but no more than the tokens just before them (a "
            "mismatch growing with the position, not the stop)"
        )
        verdict = OK
    if verdict != OK:
        finding += ": the stop is handled differently on the two sides"
    return Check(DATA, "turn_ends", title, verdict, finding, evidence,
                 advice_if(verdict, STOP_ADVICE))  # fmt: skip


def _contrast(cube: Cube, classes: list[int]) -> Ratio:
    return contrast(cube, {FINAL: classes}, K.BIN, T.LEVEL)


def _part(found: Ratio) -> str:
    return "n/a" if found is None else f"{ratio_text(found[0])}x ({ci_text(found[1])})"


def _row(found: Ratio) -> dict[str, Any] | None:
    return None if found is None else {"rate_ratio": found[0], "rate_ratio_ci": list(found[1])}


__all__ = ["STOP_ADVICE", "turn_ends"]
