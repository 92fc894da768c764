"""The engine's two-stage kernel (tokens -> turn runs -> groups) equals the one-stage kernel
``chunk_partials`` on the same tokens, for every kind of grouping the engine makes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mismatchctl.stats import chunk_partials, kernels
from mismatchctl.stats.bins import assign_bins
from mismatchctl.stats.state import Col
from mismatchctl.stats.turnruns import bin_cells, bin_partials, run_partials, turn_runs
from tests.helpers import examples, slow_param

SEGMENT_COLS = [c for c in Col if c >= Col.SEGMENTS]


def _tokens(seed: int, n_seqs: int = 40) -> tuple[np.ndarray, ...]:
    """Sequences of 1-3 turns, turn lengths 1-60, logprobs with small and large mismatch."""
    rng = np.random.default_rng(seed)
    seq, turn, steps = [], [], []
    for i in range(n_seqs):
        for t in range(int(rng.integers(1, 4))):
            k = int(rng.integers(1, 61))
            seq += [i] * k
            turn += [t] * k
        steps += [i % 5] * (len(seq) - len(steps))
    n = len(seq)
    lr = -rng.exponential(1.0, n) * (rng.random(n) < 0.8)
    lt = np.minimum(lr + rng.normal(0, 0.05, n) * (1 + 5 * (rng.random(n) < 0.05)), 0.0)
    return lr, lt, np.array(seq), np.array(turn, dtype=np.int32), np.array(steps)


def _assert_same(fast, slow, cols=None) -> None:
    """Every group's state equal, compared at once (stacked: tens of thousands of groups)."""
    assert len(fast) == len(slow)
    if not len(fast):
        return
    x = np.stack([a.state for a in fast])
    y = np.stack([b.state for b in slow])
    if cols is not None:
        x, y = x[:, cols], y[:, cols]
    np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["sequence", "turn", "turn_kind", "returning"])
def test_run_partials_equal_chunk_partials(seed: int, kind: str) -> None:
    lr, lt, seq, turn, step = _tokens(seed)
    code, size = {
        "sequence": (step, 5),  # constant per sequence (step, gpu, run, tags)
        "turn": (np.minimum(turn, 3), 4),
        "turn_kind": ((turn > 0).astype(np.int64), 2),
        # a sequence that comes back to a group it left (turns 0 and 2 in group 0)
        "returning": ((turn % 2).astype(np.int64), 2),
    }[kind]
    code = np.asarray(code, dtype=np.int64)
    runs = turn_runs(lr, lt, seq, turn)
    fast = run_partials(runs, code[runs.starts], size)
    slow = chunk_partials(lr, lt, seq, code, size, turn=turn)
    _assert_same(fast, slow)
    for a, b in zip(fast, slow, strict=True):
        fa, fb = a.finalize(), b.finalize()
        assert fa.keys() == fb.keys()
        for name, value in fa.items():
            if value is None or fb[name] is None:
                assert value is None and fb[name] is None, name
            else:
                assert value == pytest.approx(fb[name], rel=1e-9, abs=1e-12, nan_ok=True), name


@pytest.mark.parametrize("seed", range(4))
def test_bin_cells_equal_chunk_partials(seed: int) -> None:
    """(run key x bin) groups from the cells equal the token-level kernel (token columns and
    histograms), and the runs merged from the cells equal the runs reduced from the tokens."""
    lr, lt, seq, turn, step = _tokens(seed)
    edges = np.array([0.0, 1e-3, 0.1, 0.5, 0.9, 0.99, 1.0])
    nb = len(edges) - 1
    bins = assign_bins(np.exp(lr), edges)  # interleaving within turns
    cells = bin_cells(lr, lt, seq, turn, edges)
    run_code = step[cells.runs.starts].astype(np.int64)
    fast = bin_partials(cells, run_code, 5, nb)
    slow = chunk_partials(lr, lt, seq, step * nb + bins, 5 * nb, with_hist=True)
    _assert_same(fast, slow, [c for c in Col if c < Col.SEGMENTS])
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a.hist, b.hist)
        assert a.sequences == 0  # no segment columns: a bin does not cut sequences into units
    direct = turn_runs(lr, lt, seq, turn)  # one bin: cells are the runs
    np.testing.assert_allclose(cells.runs.state, direct.state, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(cells.runs.lr_sum, direct.lr_sum, rtol=1e-12)
    np.testing.assert_array_equal(cells.runs.starts, direct.starts)
    whole = chunk_partials(lr, lt, seq, np.zeros(len(seq), dtype=np.int64), 1)[0]
    merged = direct.state.sum(axis=0)
    for col in (Col.TOKENS, Col.K3_SUM, Col.R_SUM, Col.CHI2_SUM, Col.PR_SUM):
        assert merged[col] == pytest.approx(whole.state[col], rel=1e-12)


@settings(max_examples=examples(40), deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=12),
    seed=st.integers(0, 2**16),
)
def test_single_token_runs_and_tiny_slices(lengths: list[int], seed: int) -> None:
    """Runs of one token, one run per sequence, many turns: the merge formula stays exact."""
    rng = np.random.default_rng(seed)
    seq = np.repeat(np.arange(len(lengths)), lengths)
    turn = np.concatenate([np.arange(k) % 3 for k in lengths]).astype(np.int32)
    lr = -rng.exponential(1.0, len(seq))
    lt = lr + rng.normal(0, 0.1, len(seq))
    code = (seq % 3).astype(np.int64)
    runs = turn_runs(lr, lt, seq, turn)
    _assert_same(
        run_partials(runs, code[runs.starts], 3), chunk_partials(lr, lt, seq, code, 3, turn=turn)
    )


@pytest.mark.parametrize("seed", range(3))
def test_sequence_sums_from_runs_equal_those_from_tokens(seed: int) -> None:
    """compare's bootstrap takes its per-sequence sums from the engine's turn runs."""
    from mismatchctl.analysis.report.sequences import _from_runs
    from mismatchctl.stats.bootstrap import FIELDS, SeqStats

    lr, lt, seq, turn, _ = _tokens(seed)
    runs = turn_runs(lr, lt, seq, turn)
    got, want = _from_runs(runs), SeqStats.from_tokens(lr, lt, seq)
    for field in FIELDS:
        np.testing.assert_allclose(getattr(got, field), getattr(want, field), rtol=1e-12)


@pytest.mark.parametrize("n_edges", [3, 13, 200])
def test_kernel_bins_equal_assign_bins(n_edges: int) -> None:
    """The compiled kernel puts every token in the bin of ``assign_bins``, values on an edge,
    0 and 1 included, for few edges (comparisons) and many (binary search) alike."""
    rng = np.random.default_rng(n_edges)
    edges = np.concatenate(([0.0], np.sort(rng.random(n_edges - 2)), [1.0]))
    pr = np.concatenate((edges, rng.random(500), [0.0, 1.0, 1e-300]))
    lr = np.log(np.maximum(pr, 1e-300))
    pr = kernels.exps(lr)  # what the kernel bins: exp of the logprob, as every view takes it
    seq = np.arange(len(lr)) // 7
    cells = bin_cells(lr, lr + 0.01, seq, np.zeros(len(lr), dtype=np.int32), edges)
    np.testing.assert_array_equal(cells.cell_bin[cells.tok_cell], assign_bins(pr, edges))


@pytest.mark.parametrize("n_edges", [2, 5, 22, 64, 200])
def test_assign_positions_is_a_binary_search(n_edges: int) -> None:
    """Position bins by comparisons (few edges) or a binary search (many): the count of edges
    after the first that are <= the value, every edge, negatives and values past the last
    included."""
    from mismatchctl.stats.positions import assign_positions

    rng = np.random.default_rng(n_edges)
    edges = np.r_[0, np.sort(rng.choice(np.arange(1, 10 * n_edges), n_edges - 1, replace=False))]
    values = np.r_[edges, edges - 1, edges + 1, -5, 10**12, rng.integers(-10, 12 * n_edges, 500)]
    want = np.searchsorted(edges[1:], values, side="right")
    got = assign_positions(values, tuple(int(e) for e in edges))
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def _positions(seq: np.ndarray, seed: int, monotone: bool) -> np.ndarray:
    """Each token's position in its sequence's arrays: rising with gaps (tool responses between
    turns), or (``monotone=False``) anywhere, so that a run's bins come and go."""
    rng = np.random.default_rng(seed)
    if not monotone:
        return rng.integers(0, 5000, len(seq)).astype(np.int32)
    step = 1 + (rng.random(len(seq)) < 0.02) * rng.integers(1, 300, len(seq))
    pos = np.cumsum(step)
    first = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    return (pos - np.repeat(pos[first], np.diff(np.r_[first, len(seq)]))).astype(np.int32)


USES = [
    *((b, k, t, False, False) for b in (False, True) for k in (False, True) for t in (False, True)),
    (False, False, False, True, False),
    (False, False, False, False, True),
    (True, False, False, True, True),
    (False, True, True, True, True),
]


@pytest.mark.parametrize("seed", [0, slow_param(1), slow_param(2), slow_param(3)])
@pytest.mark.parametrize("monotone", [True, False])
def test_position_cells_equal_chunk_partials(seed: int, monotone: bool) -> None:
    """Cells of (turn run x probability bin x KV bin x turn-position bin x entropy bin x
    trainer-probability bin) merged onto any choice of those keys equal the token-level kernel
    on codes computed here from the positions and the given entropy / trainer bins."""
    from mismatchctl.stats.positions import LOG2_EDGES, assign_positions
    from mismatchctl.stats.turnruns import Positions, TokenBins, run_starts, token_partials

    lr, lt, seq, turn, step = _tokens(seed)
    edges = np.array([0.0, 1e-3, 0.1, 0.5, 0.9, 1.0])
    kv_edges, tp_edges = np.array(LOG2_EDGES), np.array([0, 1, 2, 4, 8, 16, 32])
    position = _positions(seq, seed, monotone)
    prompt = np.random.default_rng(seed).integers(0, 3000, seq.max() + 1)
    starts = run_starts(seq, turn)
    lengths = np.diff(np.r_[starts, len(seq)])
    pos = Positions(position, prompt[seq[starts]], kv_edges, tp_edges)
    ent = np.random.default_rng(seed + 9).integers(0, 9, len(seq))
    pt = assign_bins(np.exp(lt), edges)
    token_bins = TokenBins((ent * (len(edges) - 1) + pt).astype(np.int32), 9, len(edges) - 1)
    cells = bin_cells(lr, lt, seq, turn, edges, positions=pos, token_bins=token_bins)
    tp = np.arange(len(seq)) - np.repeat(starts, lengths)
    parts = (
        (assign_bins(np.exp(lr), edges), len(edges) - 1),
        (assign_positions(prompt[seq] + position, kv_edges), len(kv_edges)),
        (assign_positions(tp, tp_edges), len(tp_edges)),
        (ent, 9),
        (pt, len(edges) - 1),
    )
    assert cells.radix == tuple(n for _, n in parts)
    for use in USES:
        code, size = np.zeros(len(seq), dtype=np.int64), 1
        for on, (part, n) in zip(use, parts, strict=True):
            if on:
                code, size = code * n + part, size * n
        fast = token_partials(cells, step[starts].astype(np.int64), 5, use, use[0])
        slow = chunk_partials(lr, lt, seq, step * size + code, 5 * size, with_hist=use[0])
        _assert_same(fast, slow, [c for c in Col if c < Col.SEGMENTS])
        if use[0]:
            hists = [(a.hist, b.hist) for a, b in zip(fast, slow, strict=True)]
            np.testing.assert_array_equal(*map(np.stack, zip(*hists, strict=True)))
    direct = turn_runs(lr, lt, seq, turn)  # the runs do not depend on the token codes
    np.testing.assert_allclose(cells.runs.state, direct.state, rtol=1e-10, atol=1e-12)
