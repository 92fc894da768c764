"""stats/hot_sequences against a plain loop over the sequences: each sequence's z from its
tokens' relative mismatch at its cells' means and variances, centered on its step's median;
merged chunks equal one chunk; the hot ones' rate against the others' at the same cells."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mismatchctl.stats import assign_bins, parse_bins, per_token
from mismatchctl.stats.hot_sequences import (
    CELLS,
    LR_FLOOR,
    MIN_TOKENS,
    Z_TAIL,
    HotSequenceParts,
    HotSequenceState,
    hot_sequence_state,
    sequence_z,
    summarize,
)

EDGES = parse_bins("log")
N_BINS = len(EDGES) - 1


def _parts(lr, lt, seq, turn, step) -> HotSequenceParts:
    bins = assign_bins(np.exp(lr), EDGES)
    return hot_sequence_state(lr, lt, seq, turn, step, bins, N_BINS, "a")


def _state(lr, lt, seq, turn, step) -> HotSequenceState:
    return _parts(lr, lt, seq, turn, step).joined()


def _tokens(seed: int, hot_share: float = 0.0, factor: float = 1.0) -> tuple:
    """Sequences of 10-60 tokens in 4 steps, two turns each; ``hot_share`` of them with their
    mismatch ``factor`` times larger (r times sqrt(factor))."""
    rng = np.random.default_rng(seed)
    n_seq = 300
    lengths = rng.integers(10, 60, n_seq)
    seq = np.repeat(np.arange(n_seq) * 7 + 3, lengths)
    step = np.repeat(np.arange(n_seq) % 4, lengths)
    turn = np.concatenate([(np.arange(n) >= n // 2).astype(np.int32) for n in lengths])
    hot = np.repeat(rng.random(n_seq) < hot_share, lengths)
    lr = -rng.exponential(rng.choice([0.02, 0.5, 3.0], len(seq)))
    r = 0.05 * lr * rng.standard_normal(len(seq)) * np.where(hot, math.sqrt(factor), 1.0)
    r[rng.random(len(seq)) < 0.02] = 0.0  # bitwise-equal tokens
    return lr, lr + r, seq, turn, step, hot


def _reference_z(lr, lt, seq, turn, step) -> dict[int, float]:
    r = lt - lr
    cell = (turn > 0) * N_BINS + assign_bins(np.exp(lr), EDGES)
    moved = r != 0
    x = np.log(np.abs(np.where(moved, r, 1.0)) / np.maximum(-lr, LR_FLOOR))
    mean = {c: x[moved & (cell == c)].mean() for c in np.unique(cell[moved])}
    var = {c: x[moved & (cell == c)].var() for c in np.unique(cell[moved])}
    z, steps = {}, {}
    for s in np.unique(seq):
        m = (seq == s) & moved
        if m.sum() < MIN_TOKENS:
            continue
        num = sum(x[i] - mean[cell[i]] for i in np.flatnonzero(m))
        den = sum(var[cell[i]] for i in np.flatnonzero(m))
        z[int(s)] = num / math.sqrt(den)
        steps[int(s)] = int(step[seq == s][0])
    for st in set(steps.values()):
        ids = [s for s in z if steps[s] == st]
        med = float(np.median([z[s] for s in ids]))
        for s in ids:
            z[s] -= med
    return z


@pytest.mark.parametrize("hot_share", [0.0, 0.15])
def test_z_is_the_loops_and_merged_chunks_equal_one(hot_share: float) -> None:
    lr, lt, seq, turn, step, _ = _tokens(1, hot_share, 9.0)
    whole = _state(lr, lt, seq, turn, step)
    cut = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])[137]  # between two sequences
    parts = [
        _parts(lr[sl], lt[sl], seq[sl], turn[sl], step[sl])
        for sl in (slice(cut, None), slice(0, cut))
    ]
    merged = parts[0].merge(parts[1]).joined()
    assert summarize(merged) == summarize(whole)  # every number, whatever the merge order
    ref = _reference_z(lr, lt, seq, turn, step)
    for state in (whole, merged):
        z, tested = sequence_z(state)
        got = {int(s): float(v) for s, v, t in zip(state.seq, z, tested, strict=True) if t}
        assert got.keys() == ref.keys()
        for s, v in ref.items():
            assert got[s] == pytest.approx(v, rel=1e-9, abs=1e-12)


def test_planted_hot_sequences_are_found_with_their_rate() -> None:
    lr, lt, seq, turn, step, hot = _tokens(2, 0.12, 9.0)
    found = summarize(_state(lr, lt, seq, turn, step))
    planted = len(np.unique(seq[hot]))
    assert found.hot >= 0.6 * planted and found.cold <= 3
    assert 5 < found.rate_ratio < 15  # the planted 9x, the hottest of them selected
    assert all(z > Z_TAIL for *_, z in found.examples)
    # the rate: the hot sequences' K3 over their tokens at the other sequences' cell rates
    z, tested = sequence_z(_state(lr, lt, seq, turn, step))
    ids = {int(s) for s, v, t in zip(np.unique(seq), z, tested, strict=True) if t and v > Z_TAIL}
    is_hot = np.isin(seq, list(ids))
    r = lt - lr
    k3 = per_token.k3(r)
    cell = (turn > 0) * N_BINS + assign_bins(np.exp(lr), EDGES)
    rate = {c: k3[~is_hot & (cell == c)].mean() for c in np.unique(cell)}
    expected = sum(rate[c] for c in cell[is_hot])
    assert found.rate_ratio == pytest.approx(k3[is_hot].sum() / expected, rel=1e-9)


def test_sequences_alike_fill_both_tails_alike() -> None:
    lr, lt, seq, turn, step, _ = _tokens(3)
    found = summarize(_state(lr, lt, seq, turn, step))
    assert found.hot <= 3 and found.cold <= 3
    assert found.tested == len(_reference_z(lr, lt, seq, turn, step))


def test_gpu_codes_give_each_sequence_the_label_a_label_per_token_gives() -> None:
    """The engine's gpu codes and their labels: each sequence's label is its tokens' label,
    as from a label per token (which the state no longer needs)."""
    lr, lt, seq, turn, step, _ = _tokens(4)
    bins = assign_bins(np.exp(lr), EDGES)
    labels = np.array(["H100", "A100", None], object)
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    codes = np.repeat(np.arange(len(starts)) % 3, np.diff(np.r_[starts, len(seq)]))
    by_token = hot_sequence_state(lr, lt, seq, turn, step, bins, N_BINS, "a", labels[codes])
    coded = hot_sequence_state(
        lr, lt, seq, turn, step, bins, N_BINS, "a", gpu_codes=(codes, labels)
    )
    want, got = by_token.joined(), coded.joined()
    assert list(got.gpu) == list(want.gpu) == list(labels[np.arange(len(starts)) % 3])
    np.testing.assert_array_equal(got.sums, want.sums)


def test_one_run_is_judged_on_its_rows_without_copies() -> None:
    """A selection of one run: its state by run is its rows as they are, and a state in
    canonical order is its own canonical form (the checks read them without copying every
    sequence's cells again)."""
    from mismatchctl.stats.hot_sequences import by_run, canonical

    joined = _parts(*_tokens(6)[:5]).joined()
    (state,) = by_run(joined).values()
    assert state.sums is joined.sums and state.gpu is joined.gpu
    ordered = canonical(state)
    assert canonical(ordered) is ordered
    assert summarize(ordered) == summarize(state)


def test_the_callers_log_ratio_gives_the_same_sums() -> None:
    """The engine hands in the slice's ``r`` and K3 (``PartKeys.log_ratio``): the same sums,
    bit for bit, as the state's own ``lt - lr``."""
    lr, lt, seq, turn, step, _ = _tokens(5)
    bins = assign_bins(np.exp(lr), EDGES)
    r = lt - lr
    k3 = per_token.k3(r)
    own = hot_sequence_state(lr, lt, seq, turn, step, bins, N_BINS, "a").joined()
    given = hot_sequence_state(lr, lt, seq, turn, step, bins, N_BINS, "a", k3=k3, r=r).joined()
    np.testing.assert_array_equal(given.sums, own.sums)
    np.testing.assert_array_equal(given.cell, own.cell)
    doubled = hot_sequence_state(lr, lt, seq, turn, step, bins, N_BINS, "a", r=2 * r).joined()
    assert not np.array_equal(doubled.sums[:, 2], own.sums[:, 2])  # r is the one handed in


def test_the_cell_walk_against_bincount_reads_no_x_where_r_is_zero() -> None:
    """``diagnose_kernels.hot_cell_sums`` against numpy's ``bincount`` of each column, with
    ``x`` NaN wherever ``r == 0`` (the state hands it ``log 0``: it must not be read)."""
    from mismatchctl.stats import diagnose_kernels

    rng = np.random.default_rng(11)
    n, n_bins = 500, 3
    seq = np.sort(rng.integers(0, 40, n))
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    later = rng.integers(0, 3, n)
    bins = rng.integers(0, n_bins, n)
    r = np.where(rng.random(n) < 0.3, 0.0, rng.normal(0.0, 0.1, n))
    x = np.where(r == 0, np.nan, rng.normal(-3.0, 1.0, n))
    k3 = per_token.k3(r)
    owner = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, n]))
    cell = owner * 2 * n_bins + (later > 0) * n_bins + bins
    lr = -rng.exponential(1.0, n)
    lr[7] = -np.inf  # a token the line leaves out (and nothing else reads lr)
    got = np.zeros((len(starts) * 2 * n_bins, 14))
    diagnose_kernels.hot_cell_sums(starts, later, bins, n_bins, lr, r, x, k3, -3.0, got)
    x0 = np.where(r == 0, 0.0, x)
    tail = (r > 0) & (x0 > -3.0)
    fin = np.isfinite(lr)
    u = np.where(fin, lr, 0.0)
    v = np.where(fin, r, 0.0)
    columns = [np.ones(n), r != 0, x0, x0 * x0, k3, r > 0, tail, np.where(tail, k3, 0.0),
               fin, u, u * u, v, v * v, u * v]  # fmt: skip
    for j, w in enumerate(columns):
        want = np.bincount(cell, np.asarray(w, np.float64), len(got))
        np.testing.assert_allclose(got[:, j], want, rtol=1e-12, atol=1e-12)
    assert not np.isnan(got).any() and got[:, 1].sum() < n


def test_each_sequences_line_from_its_cells_against_the_tokens() -> None:
    """``line_rows``: per sequence, the count and sums of lr, lr^2, r, r^2, lr r over its cells,
    equal to the sums over its tokens, in (run, seq) order whatever the parts' order; kept to
    some cells (``sign_coherence.in_cells``) they are those cells' tokens' only."""
    from mismatchctl.stats.hot_sequences import line_rows
    from mismatchctl.stats.sign_coherence import in_cells

    rng = np.random.default_rng(17)
    n = 900
    seq = np.sort(rng.integers(0, 30, n))
    step = seq // 10
    turn = rng.integers(0, 3, n)
    bins = rng.integers(0, N_BINS, n)
    lr = -rng.exponential(1.0, n)
    lt = lr + rng.normal(0.0, 0.05, n)
    half = seq < 15
    parts = [
        hot_sequence_state(lr[m], lt[m], seq[m], turn[m], step[m], bins[m], N_BINS, "a")
        for m in (~half, half)  # the later sequences' part first
    ]
    state = HotSequenceParts([*parts[0].parts, *parts[1].parts]).joined()
    rows = line_rows(state)
    r = lt - lr
    ids = np.unique(seq)
    want = np.stack([np.bincount(np.searchsorted(ids, seq), w, len(ids))
                     for w in (np.ones(n), lr, lr * lr, r, r * r, lr * r)], 1)  # fmt: skip
    np.testing.assert_allclose(rows, want, rtol=1e-12)
    first = np.zeros(CELLS, bool)
    first[:N_BINS] = True  # the first turns' bins
    kept = line_rows(in_cells(state, first))
    m = turn == 0
    have = np.unique(seq[m])
    want_first = np.bincount(np.searchsorted(have, seq[m]), lr[m] * r[m], len(have))
    np.testing.assert_allclose(kept[:, 5], want_first, rtol=1e-12)
