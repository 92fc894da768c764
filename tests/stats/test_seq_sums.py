"""stats/seq_sums: the per-sequence rows of parts merged (listed, joined once when read) are
those of one state of the whole, in the same order; a merge leaves its operands as they were."""

from __future__ import annotations

import numpy as np
import pytest

from mismatchctl.stats.seq_sums import SeqSums, seq_sums

N_BINS = 3


def _slice(seed: int, first_seq: int) -> tuple[np.ndarray, ...]:
    """Whole sequences of 1-20 tokens from ``first_seq`` on."""
    rng = np.random.default_rng(seed)
    seq = first_seq + np.repeat(np.arange(12), rng.integers(1, 21, 12))
    lr = -rng.exponential(1.0, len(seq))
    lt = lr + 0.02 * rng.standard_normal(len(seq))
    step = seq // 5
    size = np.repeat(rng.integers(1, 9, 12), np.bincount(seq - first_seq))
    return lr, lt, seq, step, size, rng.integers(0, N_BINS, len(seq))


def _sums(*columns: np.ndarray, run: str = "a") -> SeqSums:
    lr, lt, seq, step, size, bins = columns
    return seq_sums(run, lr, lt, seq, step, size, bins, N_BINS)


def _fields(state: SeqSums) -> dict[str, list[np.ndarray]]:
    names = ("step", "tokens", "r_sum", "k3", "batch_size", "bins", "k3_bins", "line")
    return {run: [getattr(s, n) for n in names] for run, s in state.runs.items()}


def test_parts_merged_are_the_whole_in_order() -> None:
    pieces = [_slice(i, 100 * i) for i in range(4)]
    whole = _sums(*(np.concatenate(c) for c in zip(*pieces, strict=True)))
    merged = SeqSums()
    for piece in pieces:
        merged = merged.merge(_sums(*piece))
    in_place = _sums(*pieces[0])
    for piece in pieces[1:]:
        assert in_place.merge_into(_sums(*piece)) is in_place
    for state in (merged, in_place):
        got, want = _fields(state), _fields(whole)
        assert list(got) == ["a"]
        for a, b in zip(got["a"], want["a"], strict=True):
            np.testing.assert_array_equal(a, b)
    assert len(merged.runs["a"].step) == len(np.unique(np.concatenate([p[2] for p in pieces])))


def test_a_merge_leaves_its_operands_and_keeps_runs_apart() -> None:
    a, b = _sums(*_slice(1, 0)), _sums(*_slice(2, 500), run="b")
    rows = len(a.runs["a"].step)
    both = a.merge(b).merge(_sums(*_slice(3, 900)))
    assert sorted(both.runs) == ["a", "b"]
    assert len(a.runs["a"].step) == rows and list(a.runs) == ["a"]  # not the merge's rows
    assert len(both.runs["a"].step) == rows + len(_sums(*_slice(3, 900)).runs["a"].step)
    assert both.runs["a"] is both.runs["a"]  # joined once, then kept
    assert SeqSums().runs == {}


def test_the_compiled_walk_gives_bincounts_sums_bit_for_bit() -> None:
    """Each sequence's tokens and K3 per bin (``diagnose_kernels.sequence_sums``) against the
    ``bincount`` over (sequence, bin) cells it replaced, and its line sums against a loop over
    the tokens with finite sides; a bin beyond the bins' count is refused."""
    lr, lt, seq, step, size, bins = _slice(5, 0)
    lt[[3, 40]] = [np.inf, np.nan]  # left out of the line sums, counted in their bin
    r = lt - lr
    with np.errstate(over="ignore", invalid="ignore"):
        k3 = np.expm1(r) - r
    got = seq_sums("a", lr, lt, seq, step, size, bins, N_BINS).runs["a"]
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    owner = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(seq)]))
    cell = owner * N_BINS + bins
    want = np.bincount(cell, weights=k3, minlength=len(starts) * N_BINS)
    np.testing.assert_array_equal(got.k3_bins, want.reshape(-1, N_BINS))
    counts = np.bincount(cell, minlength=len(starts) * N_BINS).reshape(-1, N_BINS)
    np.testing.assert_array_equal(got.bins, counts.astype(np.float64))
    for s, (a, b) in enumerate(zip(starts, np.r_[starts[1:], len(seq)], strict=True)):
        line = np.zeros(5)
        for x, y in zip(lr[a:b], r[a:b], strict=True):
            if np.isfinite(x) and np.isfinite(y):
                line += (1.0, x, x * x, y, x * y)
        np.testing.assert_allclose(got.line[s], line, rtol=1e-12)
    assert got.line[0, 0] == np.isfinite(r[starts[0] : starts[1]]).sum()
    bad = bins.copy()
    bad[7] = N_BINS
    with pytest.raises(ValueError, match=f"bins must lie in 0..{N_BINS - 1}"):
        seq_sums("a", lr, lt, seq, step, size, bad, N_BINS)
