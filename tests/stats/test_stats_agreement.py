"""Reference == one-shot partial == streamed chunks == merged random partitions, per group too."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from stats_helpers import assert_metrics_close, flatten, make_sequences, one_group

from mismatchctl.stats import (
    LOG_EDGES,
    Partial,
    assign_bins,
    chunk_partials,
    reference_metrics,
    turn_index,
    turn_kind,
)
from mismatchctl.stats.chunk import _layout, group_order


@pytest.fixture(scope="module")
def seqs() -> list:
    return make_sequences(np.random.default_rng(7), 400, max_len=120)


def _stream(seqs: list, per_chunk: int) -> Partial:
    total = Partial.empty()
    for start in range(0, len(seqs), per_chunk):
        total = total.merge(one_group(seqs[start : start + per_chunk], first_id=start))
    return total


def _tree_merge(parts: list[Partial], rng: np.random.Generator) -> Partial:
    """Merge by repeatedly combining two random members: a random order and tree shape."""
    parts = list(parts)
    while len(parts) > 1:
        i, j = sorted(rng.choice(len(parts), size=2, replace=False))
        merged = parts[j].merge(parts[i]) if rng.random() < 0.5 else parts[i].merge(parts[j])
        parts = [p for k, p in enumerate(parts) if k not in (i, j)] + [merged]
    return parts[0]


def test_one_shot_equals_reference(seqs) -> None:
    assert_metrics_close(one_group(seqs).finalize(), reference_metrics(seqs))


@pytest.mark.parametrize("per_chunk", [1, 7, 64, 399])
def test_streamed_equals_reference(seqs, per_chunk) -> None:
    want = reference_metrics(seqs)
    assert_metrics_close(_stream(seqs, per_chunk).finalize(), want, context=f"chunk {per_chunk}")


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("n_parts", [2, 9, 60])
def test_merged_random_partitions_equal_reference(seqs, seed, n_parts) -> None:
    """Whole sequences dealt to partitions at random (many empty or single-sequence ones)."""
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, n_parts, size=len(seqs))
    parts = [
        one_group([s for s, o in zip(seqs, owner, strict=True) if o == p]) for p in range(n_parts)
    ]
    one_row = (seqs[0][0][:1], seqs[0][1][:1])
    parts.append(one_group([one_row]))  # a one-row partition: a sequence of one token
    got = _tree_merge(parts, rng).finalize()
    want = reference_metrics([*seqs, one_row])
    assert_metrics_close(got, want, context=f"seed {seed}, {n_parts} parts")


def _one_token_seqs(seqs: list) -> list:
    return [(lr[:1], lt[:1]) for lr, lt in seqs]


def test_single_token_sequences(seqs) -> None:
    short = _one_token_seqs(seqs)
    assert_metrics_close(_stream(short, 3).finalize(), reference_metrics(short))


def _turns(rng: np.random.Generator, lengths: list[int]) -> np.ndarray:
    """Non-decreasing turn index within each sequence, 0..5."""
    return np.concatenate([np.sort(rng.integers(0, 6, size=n)) for n in lengths])


def _group_reference(seqs: list, codes: np.ndarray, g: int) -> dict:
    """Reference of group ``g``: segments = the tokens of each sequence that fall in it."""
    bounds = np.cumsum([0] + [len(lr) for lr, _ in seqs])
    segs = []
    for i, (lr, lt) in enumerate(seqs):
        mask = codes[bounds[i] : bounds[i + 1]] == g
        segs.append((lr[mask], lt[mask]))
    return reference_metrics(segs)


def _grouped_case(name: str, seqs: list, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    lr, _, _ = flatten(seqs)
    turns = _turns(rng, [len(s[0]) for s in seqs])
    if name == "turn_kind":
        return turn_kind(turns), 2
    if name == "turn_index":
        return turn_index(turns), 4
    if name == "bin":
        return assign_bins(np.exp(lr), LOG_EDGES), len(LOG_EDGES) - 1
    if name == "per_sequence":  # one group per sequence, like step or gpu; some codes unused
        return np.repeat(rng.integers(0, 50, len(seqs)), [len(s[0]) for s in seqs]), 50
    if name == "revisit":  # long runs, but sequences come back to a group they left
        return np.concatenate([(np.arange(len(s[0])) // 20) % 2 for s in seqs]), 2
    return rng.integers(0, 3000, size=len(lr)), 3000  # many interleaved groups


@pytest.mark.parametrize(
    "case", ["turn_kind", "turn_index", "bin", "per_sequence", "revisit", "many"]
)
def test_grouped_equals_reference_per_group(seqs, case) -> None:
    rng = np.random.default_rng(11)
    codes, n_groups = _grouped_case(case, seqs, rng)
    lr, lt, seq = flatten(seqs)
    got = chunk_partials(lr, lt, seq, codes, n_groups)
    checked = range(n_groups) if n_groups <= 50 else rng.choice(n_groups, 60, replace=False)
    for g in checked:
        want = _group_reference(seqs, codes, g)
        assert_metrics_close(got[g].finalize(), want, context=f"{case} group {g}")
    assert sum(p.tokens for p in got) == len(lr)


def test_grouped_streamed_equals_one_shot(seqs) -> None:
    """Chunks with group codes, merged per group, equal the one-shot grouped computation."""
    rng = np.random.default_rng(3)
    lr, lt, seq = flatten(seqs)
    codes = assign_bins(np.exp(lr), LOG_EDGES)
    n = len(LOG_EDGES) - 1
    whole = chunk_partials(lr, lt, seq, codes, n, with_hist=True)
    cuts = np.flatnonzero(np.diff(seq)) + 1
    cuts = np.sort(rng.choice(cuts, size=20, replace=False))
    totals = [Partial.empty(with_hist=True) for _ in range(n)]
    for part in zip(*(np.split(a, cuts) for a in (lr, lt, seq, codes)), strict=True):
        chunk = chunk_partials(*part, n, with_hist=True)
        totals = [t.merge(c) for t, c in zip(totals, chunk, strict=True)]
    for g in range(n):
        assert_metrics_close(totals[g].finalize(), whole[g].finalize(), context=f"bin {g}")
        assert np.array_equal(totals[g].hist, whole[g].hist)


def test_group_sums_add_up_to_the_whole(seqs) -> None:
    lr, lt, seq = flatten(seqs)
    codes = assign_bins(np.exp(lr), LOG_EDGES)
    parts = chunk_partials(lr, lt, seq, codes, len(LOG_EDGES) - 1)
    whole = one_group(seqs)
    assert sum(p.tokens for p in parts) == whole.tokens == len(lr)
    assert sum(p.k3_sum for p in parts) == pytest.approx(whole.k3_sum, rel=1e-12)
    assert sum(p.low_prob_tokens for p in parts) == whole.low_prob_tokens
    assert whole.low_prob_tokens == int(np.sum(np.exp(lr) < 1e-3))


@pytest.mark.parametrize(
    "codes",
    [
        [0, 0, 1, 1, 1, 0, 2, 2],  # runs increase within each sequence
        [1, 1, 1, 1, 0, 2, 2, 2],  # a sequence comes back to group 1 after group 0
        [1, 0, 1, 0, 2, 0, 2, 0],  # interleaved, like probability bins
    ],
)
def test_layout_makes_every_segment_one_run(codes) -> None:
    seq, codes = np.array([5, 5, 5, 5, 5, 9, 9, 9]), np.array(codes)
    ids = np.arange(len(seq), dtype=np.float64)  # carried through as lr: where each token went
    lay = _layout(ids, ids, seq, codes, 3)
    assert sorted(lay.lr.tolist()) == ids.tolist()
    bounds = [*lay.seg_starts.tolist(), len(seq)]
    seen = []
    for a, b in itertools.pairwise(bounds):
        keys = set(zip(lay.seq[a:b].tolist(), lay.code[a:b].tolist(), strict=True))
        assert len(keys) == 1
        seen += keys
        assert np.all(np.diff(lay.lr[a:b]) > 0)  # token order kept inside a segment
    assert sorted(seen) == sorted(set(zip(seq.tolist(), codes.tolist(), strict=True)))


def test_group_order_is_a_stable_sort_beyond_16_bits() -> None:
    code = np.random.default_rng(5).integers(0, 200_000, size=50_000)
    assert np.array_equal(group_order(code, 200_000), np.argsort(code, kind="stable"))
