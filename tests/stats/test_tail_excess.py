"""stats/tail_excess against a plain computation from the tokens: the K3 of the tokens above the
healthy noise's positive tail (``r > TAIL_RATIO |lr|``), the run's over what the baseline's
per-(turn kind, bin) rates give the run's tokens, with the two sides' sequence-clustered
variances; merged chunks equal one; a truncation leaves the tail emptier than the noise, another
cause fills it."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from mismatchctl.stats import assign_bins, parse_bins
from mismatchctl.stats.hot_sequences import LR_FLOOR, TAIL_RATIO, hot_sequence_state
from mismatchctl.stats.tail_excess import tail_excess

EDGES = parse_bins("log")
N_BINS = len(EDGES) - 1
REL = 1e-9


def _tokens(seed: int, shift: float = 0.0, noise: float = 1.0) -> tuple:
    """Sequences of 10-60 tokens, two turns each; ``r`` the healthy noise times ``noise``, less
    ``shift`` times each sequence's own kept-mass draw (a truncation lowers ``r``)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(10, 60, 200)
    seq = np.repeat(np.arange(len(lengths)) * 5 + 1, lengths)
    step = np.repeat(np.arange(len(lengths)) % 3, lengths)
    turn = np.concatenate([(np.arange(n) >= n // 2).astype(np.int32) for n in lengths])
    lr = -rng.exponential(rng.choice([0.02, 0.5, 3.0], len(seq)))
    r = noise * 0.05 * lr * rng.standard_normal(len(seq))
    r -= shift * rng.exponential(1.0, len(seq))
    return lr, lr + r, seq, turn, step


def _state(tokens: tuple, chunks: int = 1):
    lr, lt, seq, turn, step = tokens
    bins = assign_bins(np.exp(lr), EDGES)
    cuts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    bounds = [*cuts[:: max(1, len(cuts) // chunks)][:chunks], len(seq)]
    parts = [
        hot_sequence_state(lr[a:b], lt[a:b], seq[a:b], turn[a:b], step[a:b], bins[a:b], N_BINS, "a")
        for a, b in itertools.pairwise(bounds)
    ]
    merged = parts[0]
    for p in parts[1:]:
        merged = merged.merge(p)
    return merged.runs()["a"]


def _reference(run: tuple, base: tuple) -> tuple[float, float, float, float]:
    """(ratio, relative variance, the run's rate, the baseline's at the run's cells)."""

    def columns(tokens: tuple) -> tuple:
        lr, lt, seq, turn, _ = tokens
        r = lt - lr
        k3 = np.expm1(r) - r
        above = (r > 0) & (np.abs(r) > TAIL_RATIO * np.maximum(-lr, LR_FLOOR))
        cell = (turn > 0) * N_BINS + assign_bins(np.exp(lr), EDGES)
        return seq, cell, np.where(above, k3, 0.0)

    bseq, bcell, bk3 = columns(base)
    rate = {c: bk3[bcell == c].sum() / (bcell == c).sum() for c in np.unique(bcell)}
    seq, cell, k3 = columns(run)
    keep = np.isin(cell, list(rate))
    expected = np.array([rate[c] for c in cell[keep]])
    ids = np.unique(seq[keep])
    y = np.array([k3[keep][seq[keep] == i].sum() for i in ids])
    e = np.array([expected[seq[keep] == i].sum() for i in ids])
    ratio = y.sum() / e.sum()
    var = len(ids) / (len(ids) - 1) * np.sum((y - ratio * e) ** 2) / y.sum() ** 2
    bids = np.unique(bseq)
    by = np.array([bk3[bseq == i].sum() for i in bids])
    be = np.array([sum(rate[c] for c in bcell[bseq == i]) for i in bids])
    var += len(bids) / (len(bids) - 1) * np.sum((by - be) ** 2) / by.sum() ** 2
    return ratio, var, k3[keep].sum() / keep.sum(), e.sum() / keep.sum()


@pytest.mark.parametrize("noise", [1.0, 4.0])
def test_the_tail_excess_is_the_tokens_and_merged_chunks_equal_one(noise: float) -> None:
    run, base = _tokens(1, noise=noise), _tokens(2)
    found = tail_excess(_state(run), _state(base))
    assert found is not None
    ratio, var, rate, base_rate = _reference(run, base)
    assert found.ratio == pytest.approx(ratio, rel=REL)
    assert found.rate == pytest.approx(rate, rel=REL)
    assert found.baseline_rate == pytest.approx(base_rate, rel=REL)
    half = 1.959963984540054 * math.sqrt(var)
    assert found.ci[0] == pytest.approx(ratio * math.exp(-half), rel=REL)
    assert found.ci[1] == pytest.approx(ratio * math.exp(half), rel=REL)
    merged = tail_excess(_state(run, chunks=4), _state(base, chunks=3))
    assert merged is not None and merged.ratio == pytest.approx(found.ratio, rel=1e-12)
    if noise > 1:  # another cause's noise fills the tail: many times the baseline's
        assert found.ci[0] > 5


def test_a_truncation_empties_the_tail_and_a_silent_baseline_gives_none() -> None:
    """``r`` lowered on every token (a renormalisation on the rollout side) leaves the tail
    emptier than the healthy noise's; a baseline with nothing above the tail judges nothing."""
    found = tail_excess(_state(_tokens(3, shift=0.3)), _state(_tokens(4)))
    assert found is not None and found.ratio < 0.6 and found.ci[0] < 1.2  # no excess there
    lr, _, seq, turn, step = _tokens(5)
    exact = _state((lr, lr.copy(), seq, turn, step))
    assert tail_excess(_state(_tokens(6)), exact) is None
