"""The turn-edge state of diagnose's ``turn_edges`` check (analysis/turn_edges.py) against plain
per-token references: the distances and end flags, the |r| histogram's top tokens and their
expected count, the standardized profile, and parts merged equal to one pass."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.analysis.diagnose.checks.turn_edges import profile
from mismatchctl.analysis.turn_edges import (
    EDGE_TOKENS,
    FINAL,
    R_EDGES,
    EdgeExtra,
    edge_codes,
    final_distances,
    top_shares,
)
from mismatchctl.engines.keys import PartKeys
from mismatchctl.stats import assign_bins, parse_bins

EDGES = parse_bins("log")


def tokens(seed: int = 0, sequences: int = 60) -> dict[str, np.ndarray]:
    """Sequences of 1-3 turns (turn index per model token), logprobs with a heavy-ish tail."""
    rng = np.random.default_rng(seed)
    seq, turn = [], []
    for s in range(sequences):
        for t in range(int(rng.integers(1, 4))):
            n = int(rng.integers(1, 30))
            seq += [s] * n
            turn += [t] * n
    n = len(seq)
    lr = -rng.exponential(1.5, n)
    lt = lr + rng.standard_t(3, n) * 0.05
    return {
        S.STEP: np.zeros(n, np.int64),
        S.SEQ: np.array(seq, np.int64),
        S.TURN: np.array(turn, np.int64),
        S.ROLLOUT: lr,
        S.TRAINER: lt,
    }


def keys_of(cols: dict[str, np.ndarray]) -> PartKeys:
    return PartKeys(pa.table(cols), "r", {}, EDGES)


def reference_codes(
    seq: np.ndarray, turn: np.ndarray, to_end: list[int] | None = None
) -> tuple[list[int], list[bool]]:
    """Per token, by walking each turn run (``to_end`` gets each token's distance from the
    run's last token)."""
    dist, end = [], []
    i, n = 0, len(seq)
    while i < n:
        j = i
        while j < n and seq[j] == seq[i] and turn[j] == turn[i]:
            j += 1
        followed = j < n and seq[j] == seq[i]
        for k in range(i, j):
            dist.append(k - i)
            end.append(followed and j - k <= EDGE_TOKENS)
            if to_end is not None:
                to_end.append(j - 1 - k)
        i = j
    return dist, end


def test_distances_and_end_flags_match_a_walk_over_the_turns() -> None:
    cols = tokens(1)
    start, end = edge_codes(cols[S.SEQ], cols[S.TURN])
    dist, ref_end = reference_codes(cols[S.SEQ], cols[S.TURN])
    assert start.tolist() == dist
    assert end.tolist() == ref_end
    assert end.any() and not end.all()
    to_end: list[int] = []
    reference_codes(cols[S.SEQ], cols[S.TURN], to_end)
    assert final_distances(cols[S.SEQ], cols[S.TURN]).tolist() == to_end


def test_parts_merged_equal_one_pass() -> None:
    cols = tokens(2)
    extra = EdgeExtra(EDGES)
    whole = extra.compute(pa.table(cols), keys_of(cols))
    cut = int(np.flatnonzero(cols[S.SEQ] == 30)[0])  # a sequence boundary
    halves = [{k: v[:cut] for k, v in cols.items()}, {k: v[cut:] for k, v in cols.items()}]
    states = [extra.compute(pa.table(h), keys_of(h)) for h in halves]
    merged = extra.merge(*states)
    assert np.array_equal(merged.hist, whole.hist)
    for a, b in zip(
        (*merged.cubes, *merged.ends.values()), (*whole.cubes, *whole.ends.values()), strict=True
    ):
        np.testing.assert_allclose(a.state, b.state, rtol=1e-12, atol=1e-12)


def test_the_cubes_are_those_of_each_sides_tokens_alone() -> None:
    """Each cube bit for bit the cube of a filtered copy of its tokens (the first turns', the
    later turns', every finite token's for the ends), non-finite tokens left out of all three
    and of the histogram."""
    from mismatchctl.stats.cube.cube import Cube
    from mismatchctl.stats.positions import assign_positions

    cols = tokens(6, sequences=120)
    cols[S.TRAINER][[3, 40, 41]] = [np.nan, -np.inf, np.inf]
    extra = EdgeExtra(EDGES)
    state = extra.compute(pa.table(cols), keys_of(cols))
    lr, lt, seq, turn = cols[S.ROLLOUT], cols[S.TRAINER], cols[S.SEQ], cols[S.TURN]
    to_end: list[int] = []
    dist, end = reference_codes(seq, turn, to_end)
    followed = np.zeros(len(seq), bool)
    i = 0
    while i < len(seq):  # whether a later turn of the sequence follows each token's run
        j = i
        while j < len(seq) and seq[j] == seq[i] and turn[j] == turn[i]:
            j += 1
        followed[i:j] = j < len(seq) and seq[j] == seq[i]
        i = j
    bins = assign_bins(np.exp(lr), EDGES)
    codes = np.column_stack([assign_positions(np.array(dist), (0, 1, 2, 4, 8, 16, 64)), end, bins])
    final = assign_positions(np.array(to_end), (0, 1, 2, 4, 8))
    ends = np.column_stack([final, ~followed, bins])
    finite = np.isfinite(lr) & np.isfinite(lt)

    def cube(spec, codes: np.ndarray, keep: np.ndarray) -> Cube:  # type: ignore[no-untyped-def]
        s = seq[keep]
        rows = np.cumsum(np.r_[True, s[1:] != s[:-1]]) - 1
        none = np.zeros((int(rows[-1]) + 1, 0), np.int32)
        return Cube.from_tokens(spec, lr[keep], lt[keep], rows, codes[keep].astype(np.int32), none)

    for got, later in zip(state.cubes, (False, True), strict=True):
        want = cube(extra.spec, codes, finite & ((turn > 0) == later))
        assert np.array_equal(got.state, want.state)
    assert np.array_equal(state.ends["r"].state, cube(extra.final, ends, finite).state)
    assert state.hist.sum() == finite.sum()


def test_the_ends_cube_holds_each_turns_last_tokens() -> None:
    cols = tokens(5, sequences=300)
    state = EdgeExtra(EDGES).compute(pa.table(cols), keys_of(cols))
    r = cols[S.TRAINER] - cols[S.ROLLOUT]
    k3 = np.expm1(r) - r
    to_end = final_distances(cols[S.SEQ], cols[S.TURN])
    table = state.ends["r"].table([FINAL])
    for code, (lo, hi) in enumerate([(0, 1), (1, 2), (2, 4), (4, 8), (8, 10**9)]):
        cell = (to_end >= lo) & (to_end < hi)
        assert table[code, 0] == cell.sum()  # tokens
        assert abs(table[code, 1] - k3[cell].sum()) <= 1e-12 * max(k3[cell].sum(), 1.0)


def test_top_tokens_and_their_expected_count_match_per_token_counting() -> None:
    cols = tokens(3, sequences=200)
    state = EdgeExtra(EDGES).compute(pa.table(cols), keys_of(cols))
    r = np.abs(cols[S.TRAINER] - cols[S.ROLLOUT])
    start, _ = edge_codes(cols[S.SEQ], cols[S.TURN])
    bins = assign_bins(np.exp(cols[S.ROLLOUT]), EDGES)
    found = top_shares(state.hist, 0.05, 10)
    # the boundary: the highest histogram edge with at least 5% of the tokens at or above it
    need = max(0.05 * len(r), 10)
    cut = max(e for e in R_EDGES if (r >= e).sum() >= need)
    top = r >= cut
    assert top.sum() >= need
    for kind, later in (("first", False), ("later", True)):
        own = (cols[S.TURN] > 0) == later
        at_edge = own & (start < EDGE_TOKENS)
        assert found[kind].top == int((top & own).sum())
        assert found[kind].at_edge == int((top & at_edge).sum())
        expected = 0.0
        for b in np.unique(bins):
            in_bin = own & (bins == b)
            share = (at_edge & in_bin).sum() / in_bin.sum()
            expected += (top & in_bin).sum() * share
        assert abs(found[kind].expected - expected) <= 1e-9 * max(expected, 1.0)


def test_the_profile_is_the_standardized_rate_of_each_distance() -> None:
    cols = tokens(4, sequences=300)
    state = EdgeExtra(EDGES).compute(pa.table(cols), keys_of(cols))
    later = cols[S.TURN] > 0
    r = cols[S.TRAINER] - cols[S.ROLLOUT]
    k3 = np.expm1(r) - r
    start, _ = edge_codes(cols[S.SEQ], cols[S.TURN])
    bins = assign_bins(np.exp(cols[S.ROLLOUT]), EDGES)
    rows = profile(state.cubes[1])
    assert state.cubes[1].tokens == int(later.sum())
    assert abs(state.cubes[1].k3_sum - k3[later].sum()) <= 1e-12 * k3[later].sum()
    rate = {b: k3[later & (bins == b)].mean() for b in np.unique(bins[later])}
    classes = [(0, 1), (1, 2), (2, 4), (4, 8), (8, 16), (16, 64)]
    for row, (lo, hi) in zip(rows, classes, strict=False):
        cell = later & (start >= lo) & (start < hi)
        assert row.tokens == int(cell.sum())
        if cell.sum():
            expected = sum(rate[b] for b in bins[cell])
            assert row.rate_ratio is not None
            assert abs(row.rate_ratio - k3[cell].sum() / expected) <= 1e-9 * row.rate_ratio
