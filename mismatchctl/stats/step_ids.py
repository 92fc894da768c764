"""Each token id's shift of ``r`` step by step, as a mergeable state: whether the ids some steps
move are moved there alone (other weights served at those steps) or alike at every step (a
chat template, a logit processor or a checkpoint that every step shares).

Per step: per id bucket (``id % BUCKETS``) the model tokens and the sums of ``r`` and ``r^2``.
The buckets bound the state at ``3 x BUCKETS`` doubles a step whatever the vocabulary (a
1,000-step run: 24 MB); a vocabulary of up to ``BUCKETS`` ids has a bucket per id, a larger one
shares each bucket among ids ``BUCKETS`` apart, whose mean is the bucket's tokens' (its most
frequent id's, mostly). Tokens without an id are left out (``TokenShiftState`` counts them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

BUCKETS = 1024
"""Id buckets a step (a power of two: an id's bucket is its low bits): an id per bucket for
vocabularies of up to 1,024 ids (the sample data's and the corpora's models)."""

MIN_TOKENS = 30
"""Tokens a bucket needs on each side of a split to be compared (``token_shift``'s
``ID_MIN_TOKENS``)."""


@dataclass
class StepIdState:
    """Per step: a (3, ``BUCKETS``) array of tokens, sum of ``r`` and sum of ``r^2``."""

    steps: dict[int, np.ndarray] = field(default_factory=dict)

    def merge(self, other: StepIdState) -> StepIdState:
        """The two states' sums; neither is changed (a step held by one alone is shared, not
        copied: an engine's running total over many parts costs a dict of its steps a merge)."""
        out = dict(self.steps)
        for s, a in other.steps.items():
            out[s] = out[s] + a if s in out else a
        return StepIdState(out)

    def within(self, steps: set[int]) -> np.ndarray:
        """The sums over ``steps`` (zeros where none is held)."""
        total = np.zeros((3, BUCKETS))
        for s in steps & self.steps.keys():
            total += self.steps[s]
        return total


def step_id_state(
    ids: np.ndarray, r: np.ndarray, step: np.ndarray, starts: np.ndarray
) -> StepIdState:
    """One part's state: ``ids`` each token's id (-1: none), ``r`` its ``lt - lr``, ``step``
    its step and ``starts`` each sequence's first row (a sequence's tokens share a step and are
    contiguous: the step is looked up per sequence, not sorted per token)."""
    from mismatchctl.stats import diagnose_kernels

    if len(ids) == 0:
        return StepIdState()
    values, code = np.unique(step[starts], return_inverse=True)
    sums = np.zeros((len(values), 3, BUCKETS))
    diagnose_kernels.step_id_sums(
        np.ascontiguousarray(ids, np.int64),
        np.ascontiguousarray(r, np.float64),
        np.ascontiguousarray(starts, np.int64),
        code.astype(np.int64),
        sums,
    )
    return StepIdState({int(s): sums[i] for i, s in enumerate(values)})


@dataclass(frozen=True)
class ShiftBeyond:
    """Each id's shift at some steps beyond its shift at the other steps: the share of the
    steps' ``r`` variance it carries (``beyond``), each side's own share (``inside``,
    ``outside``), the correlation of the two sides' shifts (weighted by the steps' tokens) and
    the ids compared."""

    beyond: float
    inside: float
    outside: float
    correlation: float
    ids: int


def shift_beyond(state: StepIdState, steps: set[int]) -> ShiftBeyond | None:
    """The ids' shifts at ``steps`` against the other steps': per id bucket with ``MIN_TOKENS``
    on both sides, its mean ``r`` about its side's mean; the squared difference of the two,
    times the steps' tokens, less what the two means' sampling scatter makes it, summed over the
    ids and over the steps' sum of squares about their mean. Near 0 when the ids move alike
    inside and outside the steps (or not at all); the ids' own shift at the steps when nothing
    moves them outside. None: no id has enough tokens on both sides, or ``r`` does not vary."""
    inside = state.within(steps)
    outside = state.within(state.steps.keys() - steps)
    (n1, s1, q1), (n0, s0, q0) = inside, outside
    t1, t0 = n1.sum(), n0.sum()
    ok = (n1 >= MIN_TOKENS) & (n0 >= MIN_TOKENS)
    if not ok.any():
        return None
    spread1 = float(q1.sum() - s1.sum() ** 2 / t1)
    spread0 = float(q0.sum() - s0.sum() ** 2 / t0)
    if not (spread1 > 0 and spread0 > 0):
        return None
    n1, s1, q1, n0, s0, q0 = (a[ok] for a in (n1, s1, q1, n0, s0, q0))
    m1, m0 = s1 / n1, s0 / n0
    v1 = np.maximum(q1 / n1 - m1 * m1, 0.0) * n1 / (n1 - 1)  # each id's variance of r
    v0 = np.maximum(q0 / n0 - m0 * m0, 0.0) * n0 / (n0 - 1)
    a1, a0 = m1 - float(inside[1].sum()) / t1, m0 - float(outside[1].sum()) / t0
    beyond = float((n1 * (a1 - a0) ** 2 - v1 - n1 * v0 / n0).sum())
    own1 = float((n1 * a1 * a1 - v1).sum())
    own0 = float((n0 * a0 * a0 - v0).sum())
    cross = float((n1 * a1 * a0).sum())
    norm = float(np.sqrt((n1 * a1 * a1).sum() * (n1 * a0 * a0).sum()))
    return ShiftBeyond(
        max(beyond, 0.0) / spread1,
        max(own1, 0.0) / spread1,
        max(own0, 0.0) / spread0,
        cross / norm if norm > 0 else 0.0,
        int(ok.sum()),
    )


def drift(state: StepIdState) -> ShiftBeyond | None:
    """The ids' shifts of the first half of the steps (in step order) beyond the second half's
    (``shift_beyond``): near 0 when a fixed difference (a checkpoint every step shares, a
    configuration, a template) moves the same ids alike throughout, the drift of the shifts
    when they follow the training (weights a step behind: each step's update is another).
    None with fewer than two steps."""
    steps = sorted(state.steps)
    if len(steps) < 2:
        return None
    return shift_beyond(state, set(steps[: len(steps) // 2]))


def drift_within(state: StepIdState, steps: set[int]) -> ShiftBeyond | None:
    """``drift`` taken among ``steps`` alone: the first half of them (in step order) beyond the
    second half. None with fewer than two of them held."""
    return drift(StepIdState({s: a for s, a in state.steps.items() if s in steps}))


__all__ = [
    "BUCKETS",
    "MIN_TOKENS",
    "ShiftBeyond",
    "StepIdState",
    "drift",
    "drift_within",
    "shift_beyond",
    "step_id_state",
]
