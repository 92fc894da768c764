"""Turns whose two sides are shifted by one position, found one turn at a time.

The alignment check's lag correlations (``stats/comoments.py``) see a shift of the whole
selection; a writer that misaligns some samples only (one worker's batches, the turns after a
tool response sliced with an offset) leaves them under the correlation of the rest. Within each
turn (consecutive model tokens of one sequence) the mean K3 of the pairs ``(lr_t, lt_{t+1})``
(lag +1: the trainer's value of token t sits one position later) and ``(lr_t, lt_{t-1})`` (lag
-1) is compared with that of ``(lr_t, lt_t)`` (lag 0) over the same rollout tokens (the turn's
last, or first, left out: one monster token must not weigh on one side only). Neighbouring
tokens are different
tokens: paired with the wrong position their logprobs differ by about one nat, a K3 of tenths,
while the right pairing differs by the numeric mismatch. A pair of the same token twice (a run
of ``#``, of spaces) is left out: a repeated token is paired with itself at every lag and tells
no shift (the corpus' ``tpl-strip-newline``, a later turn of 32 ``#`` at a K3 of 0.24 from the
template's fault, matched one position later at 0.0066 and was taken for a writer's shift). A
turn is *misaligned* when it has at least ``MIN_PAIRS`` adjacent pairs of two different tokens
and, for one shifted lag, a lag-0 mean K3 of at least ``MIN_K3`` (a wrong pairing's level;
near-certain tokens give near-zero K3 at every lag) that is ``FACTOR`` times the shifted one,
the shifted one a match (``MAX_MATCH`` at most). A fill value on one side (0.0 on a turn's last
tokens) costs the same at every lag and is no shift (the sentinels check's business).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mismatchctl.stats import per_token
from mismatchctl.stats.comoments import Shifted, shifted_pairs
from mismatchctl.stats.sentinels import MAX_EXAMPLES, merge_counts
from mismatchctl.stats.state import RATIO_CLAMP

MIN_PAIRS = 8
"""Adjacent pairs a turn needs: with fewer, a few near-certain tokens can make any lag look good."""

MIN_K3 = 0.02
"""Lag-0 mean K3 (the top of the medium band) below which a turn is not tested: a shifted
pairing of different tokens costs tenths; an aligned turn this close is not misaligned."""

FACTOR = 10.0
"""How much smaller a shifted lag's mean K3 must be than lag 0's: a shifted turn's right pairing
is tens to thousands of times closer than its stored one; an aligned turn's shifted pairings are
far worse than its own."""

MAX_MATCH = 0.5
"""The most a shifted pairing's mean K3 may be to match: a turn's right pairing differs by the
numeric mismatch (under 0.1 a token for every fault of the corpora but a wrong checkpoint), a
wrong one by about a nat (the corpora's runs paired one position off: 0.11 a token on a model
next to uniform, 1 and more on trained ones). Where a run's every pairing is far off, one short
turn can pair ten times less badly one position off without matching: a router replayed a
position late (1.7 a token), stale weights beside a gpu's faulty merge (0.42), a gpu's loud
split-KV merge (0.60) each had one such turn, shifted at 2.1-5.7 against 23-166 stored, and
a writer's shift was named first (``data``) on a run without one."""

# examples kept: MAX_EXAMPLES misaligned turns, (label, step, seq, turn, lag)


@dataclass
class MisalignState:
    """Turns tested, misaligned turns and their tokens, per lag, and a few examples."""

    turns: int = 0
    misaligned: int = 0
    tokens: int = 0  # model tokens of the misaligned turns
    later: int = 0  # misaligned turns matching one position later (lag +1)
    earlier: int = 0  # ... one position earlier (lag -1)
    examples: list[tuple[str, int, int, int, str]] = field(default_factory=list)

    def merge(self, other: MisalignState) -> MisalignState:
        return merge_counts(self, other)


def misalign_state(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    turn: np.ndarray,
    step: np.ndarray,
    label: str = "",
    k3: np.ndarray | None = None,
    r: np.ndarray | None = None,
    shifted: Shifted | None = None,
    ids: np.ndarray | None = None,
) -> MisalignState:
    """The misaligned turns of one chunk of whole sequences (a turn's tokens contiguous and in
    order); ``label`` (e.g. the run) goes into the examples; ``k3`` and ``r``: each token's
    ``expm1(r) - r`` and ``r = lt - lr`` when the caller has them, ``shifted``: its shifted
    pairs (``comoments.shifted_pairs``); each unclamped, clamped here where ``|r|`` passes the
    clamp; ``ids``: each token's id (-1 where unknown), None when the dumps hold none."""
    from mismatchctl.stats import diagnose_kernels

    if len(lr) < 2:
        return MisalignState()
    r = lt - lr if r is None else r
    if shifted is None:
        shifted = shifted_pairs(lr, lt, seq, turn)
    # K3 of the pairs in numpy (vectorised), each turn's sums and tests in one compiled walk
    k0 = _k3(r) if k3 is None else clamped_k3(r, k3)
    counts = np.zeros(5, dtype=np.int64)
    first = np.zeros(MAX_EXAMPLES, dtype=np.int64)
    lag = np.zeros(MAX_EXAMPLES, dtype=np.int64)
    if ids is None:
        ids = np.full(len(lr), -1, dtype=np.int64)
    kept = diagnose_kernels.misaligned_turns(
        seq, turn, np.ascontiguousarray(ids, np.int64), k0, clamped_k3(shifted.r_plus, shifted.k3_plus),
        clamped_k3(shifted.r_minus, shifted.k3_minus), MIN_PAIRS, MIN_K3, FACTOR, MAX_MATCH,
        counts, first, lag,
    )  # fmt: skip
    state = MisalignState(*(int(c) for c in counts))
    for s, shift in zip(first[:kept], lag[:kept], strict=True):
        what = "one position later" if shift > 0 else "one position earlier"
        state.examples.append((label, int(step[s]), int(seq[s]), int(turn[s]), what))
    return state


def clamped_k3(r: np.ndarray, k3: np.ndarray) -> np.ndarray:
    """``_k3(r)`` from ``r``'s unclamped K3 ``k3``: its values where ``|r|`` is within the clamp
    (the clamp leaves ``r`` as it is there: the same bits), made again only where it is not (a
    sentinel, a shifted pair of different tokens: a few per slice), not over the whole slice."""
    over = np.flatnonzero(np.abs(r) > RATIO_CLAMP)
    if len(over) == 0:
        return k3
    out = k3.copy()
    out[over] = _k3(r[over])
    return out


def _k3(r: np.ndarray) -> np.ndarray:
    """K3 of ``r`` clamped to +-``RATIO_CLAMP`` (a sentinel value among the tokens weighs alike
    at every lag: the sentinels check's business, not a shift)."""
    with np.errstate(invalid="ignore"):
        return per_token.k3(np.clip(r, -RATIO_CLAMP, RATIO_CLAMP))
