"""Signs of r that agree within sequences: what another policy does and numeric noise does not.

Numeric noise (a kernel, a dtype, a batch shape) moves each token's trainer logprob up or down
independently of the token before it. A policy difference (stale weights, a weight sync that did
not land, another checkpoint or LoRA state) moves a whole response's tokens together: the update
that separates the two policies raised or lowered that response's likelihood, so the signs of
``r = lt - lr`` lean the same way along it. Per sequence, the count of tokens with ``r > 0`` is
compared with its expectation at its cells' rates (turn kind x probability bin, per run: a
semantic offset such as a temperature moves the sign with the probability, not with the
sequence), over the binomial variance; the mean square of those z is 1 for signs independent
within sequences (``dispersion``) and its excess is tested as a chi-square with one degree of
freedom per sequence. The state is ``stats.hot_sequences``'s (per sequence and cell).

``tail_coherence`` is the same test on the tokens with ``r`` in the healthy noise's positive
tail (``hot_sequences.TAIL_RATIO`` of ``|lr|``): a truncation renormalised on the rollout side
lowers ``r`` on every token, so it leaves the sign test few positive signs to read and leans the
responses about zero with its kept mass; above the noise it moves no token, and a lean there is
another policy's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mismatchctl.stats.hot_sequences import (
    CELLS,
    MIN_TOKENS,
    NONZERO,
    POSITIVE,
    TAIL,
    Z_TAIL,
    HotSequenceState,
    canonical,
    keep_sequences,
    sequence_z,
)
from mismatchctl.stats.localize.math import chi2_sf


@dataclass
class SignCoherence:
    """Sequences tested, the dispersion of their sign counts (1 under independent signs), its
    chi-square p-value, the share of sequences at |z| > 3, and the tested sequences' mean
    number of tokens (a lean that lasts along a response grows the dispersion's excess over 1
    with the response's length)."""

    tested: int
    dispersion: float
    p_value: float
    extreme_share: float
    mean_tokens: float = math.nan


def in_steps(state: HotSequenceState, steps: set[int]) -> HotSequenceState:
    """The sequences of some steps only (their cells' rates are then the steps' own)."""
    return keep_sequences(state, np.isin(state.step, np.fromiter(steps, np.int64, len(steps))))


def off_gpus(state: HotSequenceState, gpus: set[str]) -> HotSequenceState:
    """The sequences of the other gpus than these (those whose gpu is known)."""
    known = np.array([g is not None and g not in gpus for g in state.gpu], bool)
    return keep_sequences(state, known.reshape(len(state.step)))


def in_cells(state: HotSequenceState, cells: np.ndarray) -> HotSequenceState:
    """Each sequence's tokens in these cells only (``cells``: a mask over the cell codes, e.g.
    the first turns' probability bins); a sequence left with none is dropped."""
    keep = cells[state.cell]
    has = np.bincount(state.row[keep], minlength=len(state.step)) > 0
    where = np.cumsum(has) - 1
    return HotSequenceState(
        state.runs, state.run[has], state.step[has], state.seq[has], where[state.row[keep]],
        state.cell[keep], state.sums[keep], state.gpu[has],
    )  # fmt: skip


def off_hot(state: HotSequenceState) -> HotSequenceState:
    """One run's sequences that are not hot (``hot_sequences.summarize``'s: tested and at z
    above ``Z_TAIL`` against the others of their step), in :func:`canonical` order: whether the
    others lean too (a lean of every response) or only the hot ones (a lean of some
    requests)."""
    state = canonical(state)
    z, tested = sequence_z(state)
    return keep_sequences(state, ~(tested & (z > Z_TAIL)), list(state.runs))


def sign_coherence(state: HotSequenceState) -> SignCoherence:
    """The sign test of one run's sequences (``hot_sequences.by_run``)."""
    return _coherence(state, POSITIVE)


def tail_coherence(state: HotSequenceState) -> SignCoherence:
    """The sign test on the counts of tokens with ``r`` above ``TAIL_RATIO`` of their ``|lr|``
    (the positive tail of the healthy noise), at the same cells' rates."""
    return _coherence(state, TAIL)


def _coherence(state: HotSequenceState, column: int) -> SignCoherence:
    state = canonical(state)
    rows = len(state.step)
    n, pos = state.sums[:, NONZERO], state.sums[:, column]
    groups, g = np.unique(state.run[state.row] * CELLS + state.cell, return_inverse=True)
    gn = np.bincount(g, n, len(groups))
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(gn > 0, np.bincount(g, pos, len(groups)) / gn, 0.5)
    observed = np.bincount(state.row, pos, rows)
    expected = np.bincount(state.row, n * p[g], rows)
    var = np.bincount(state.row, n * p[g] * (1 - p[g]), rows)
    tokens = np.bincount(state.row, n, rows)
    tested = (tokens >= MIN_TOKENS) & (var > 0)
    k = int(tested.sum())
    if k == 0:
        return SignCoherence(0, math.nan, math.nan, math.nan)
    z = (observed[tested] - expected[tested]) / np.sqrt(var[tested])
    q = float(np.sum(z * z))
    return SignCoherence(
        k, q / k, float(chi2_sf(q, k)), float(np.mean(np.abs(z) > 3)), float(tokens[tested].mean())
    )


__all__ = [
    "SignCoherence", "in_cells", "in_steps", "off_gpus", "off_hot", "sign_coherence",
    "tail_coherence",
]  # fmt: skip
