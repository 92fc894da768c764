"""stats/seq_sums: the per-sequence rows of parts merged (listed, joined once when read) are
those of one state of the whole, in the same order; a merge leaves its operands as they were."""

from __future__ import annotations

import numpy as np

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
