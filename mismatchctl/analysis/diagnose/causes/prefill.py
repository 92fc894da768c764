"""The start of every prefill: a burst at the first tokens after each tool response is what a
rendering fault makes, and what a prefill path makes too (chunked prefill, its attention merge,
a padded prefill). They differ in the first turns: a rendering fault lies in the tool
responses' text, which the first turns never see, so their first tokens stay as healthy as the
rest of them; a prefill path runs at the start of every prefill, the prompt's too, and where
it depends on the prefill's length (a prefill longer than a chunk), at the longer prompts'
starts (``stats/signed_parts.py``'s sums: the first 8 tokens of the first turns at the KV
positions above the bin holding their median, against the rest of the first turns at the same
token probabilities).

Over the corpus (seed 0) and the held-out one (seed 7): ``cp-chunk-merge``'s longer prompts'
starts (KV 64 and up) are 4.6x and 3.2x the first turns' rest; every template fault's, alone or
beside another fault, 0.41-1.04x (``tpl-*``, ``combo-topp-template``, ``combo-template-*``), and
the healthy runs' 0.65-1.07x."""

from __future__ import annotations

import numpy as np

from mismatchctl.analysis.diagnose.check import OK
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.analysis.diagnose.contrasts import ci_text, relative
from mismatchctl.stats.localize.result import ratio_text
from mismatchctl.stats.signed_parts import FIELDS, RateRatio, rate_ratio

FACTOR, CI_LOW = 1.5, 1.2
"""Hot at 1.5x with the interval's low end above 1.2 (the ``baseline`` check's thresholds for a
relative finding): two healthy runs' first turns differ by less."""

START = 0  # the signed cells' first turn-position bin: the first 8 tokens of a turn
TURN, KV, POSITION = (FIELDS.index(name) for name in ("turn", "kv_position", "turn_position"))


def prefill_starts(ctx: Context) -> RateRatio | None:
    """The longer prompts' starts in the first turns against the rest of the first turns."""
    sums = ctx.state.signed.total()
    if sums is None:
        return None
    turn, kv, position = np.indices(sums.shape[1:-1])[[TURN, KV, POSITION]]
    first = turn == 0
    starts = first & (position == START)
    counts = (sums[..., 0].sum(axis=0) * starts).sum(axis=(0, 2, 3))  # the starts per KV bin
    if counts.sum() == 0:
        return None
    median = int(np.searchsorted(np.cumsum(counts), counts.sum() / 2))
    longer = starts & (kv > median)
    return rate_ratio(sums, longer, first & ~starts) if longer.any() else None


def hot(found: RateRatio | None) -> bool:
    return found is not None and relative(found.ratio, found.ci, FACTOR, CI_LOW, np.inf) != OK


def sentence(found: RateRatio) -> str:
    return (
        f"the first turns' first 8 tokens of the longer prompts are {ratio_text(found.ratio)}x "
        f"the rest of the first turns at the same token probabilities ({ci_text(found.ci)}): "
        "the start of every prefill is hot, the prompt's too, which no tool response's text "
        "reaches (a prefill path, not a rendering fault)"
    )
