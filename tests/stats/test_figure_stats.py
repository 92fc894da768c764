"""Figure stats: fixed-edge densities, per-segment log-ppl, bottom-k samples.

Every merge must be exact: merging the states of any partition of the data, in any order, gives
the state of the whole data, bit for bit.
"""

from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pytest

from mismatchctl.stats.density import Axis, Density2D
from mismatchctl.stats.sample import SegmentSample, mix64, priorities, run_hash
from mismatchctl.stats.segments import Segments, segments

X = Axis("log10", -6.0, 0.0, 24, scale=1e-6)
Y = Axis("asinh", -8.0, 8.0, 30, scale=1e-3)
SAMPLE_FIELDS = ("priority", "run", "seq", "kind", "step", "tokens")


def _random_partition(rng: np.random.Generator, n: int, max_parts: int = 6) -> list[np.ndarray]:
    """Contiguous slices of 0..n-1, some of them empty or of one element."""
    cuts = np.sort(rng.integers(0, n + 1, size=rng.integers(0, max_parts)))
    bounds = [0, *cuts.tolist(), n]
    return [np.arange(a, b) for a, b in itertools.pairwise(bounds)]


# --- Axis and Density2D ---------------------------------------------------------------------


def test_axis_index_clips_out_of_range_and_skips_nan() -> None:
    axis = Axis("linear", 0.0, 1.0, 4)
    idx = axis.index(np.array([-5.0, 0.0, 0.24, 0.25, 0.99, 1.0, 7.0, np.nan]))
    assert idx.tolist() == [0, 0, 0, 1, 3, 3, 3, -1]


def test_axis_transforms_round_trip() -> None:
    u = np.linspace(Y.lo, Y.hi, 11)
    assert np.allclose(Y.forward(Y.inverse(u)), u)
    assert np.allclose(X.inverse(X.forward(np.array([1e-5, 0.3, 1.0]))), [1e-5, 0.3, 1.0])
    assert X.forward(0.0) == pytest.approx(-6.0)  # log10 floors at its scale


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(transform="cube", lo=0, hi=1, bins=2),
        dict(transform="linear", lo=1, hi=1, bins=2),
        dict(transform="linear", lo=0, hi=1, bins=0),
        dict(transform="asinh", lo=0, hi=1, bins=2, scale=0.0),
    ],
)
def test_axis_rejects_bad_definitions(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        Axis(**kwargs)


def test_density_matches_numpy_histogram2d_in_range() -> None:
    rng = np.random.default_rng(0)
    xs, ys = rng.uniform(0.0, 1.0, 5000), rng.uniform(0.0, 1.0, 5000)
    axis = Axis("linear", 0.0, 1.0, 20)
    d = Density2D.of(axis, axis, xs, ys)
    expected, _, _ = np.histogram2d(xs, ys, bins=[axis.edges, axis.edges])
    assert np.array_equal(d.counts, expected.astype(np.int64))


def _pairs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities (some 0, some above 1 by rounding) and log ratios (some far out, some NaN)."""
    xs = np.exp(-rng.exponential(3.0, n))
    xs[rng.random(n) < 0.05] = 0.0
    xs[rng.random(n) < 0.02] = 1.0 + 1e-5
    ys = rng.normal(0, 1, n) * rng.choice([1e-5, 1e-2, 5.0, 1e4], size=n)
    ys[rng.random(n) < 0.01] = np.nan
    return xs, ys


def test_density_counts_every_pair_once() -> None:
    rng = np.random.default_rng(1)
    xs, ys = _pairs(rng, 3000)
    d = Density2D.of(X, Y, xs, ys)
    assert d.total == int(np.sum(~np.isnan(ys)))


@pytest.mark.parametrize("seed", range(8))
def test_density_merge_of_random_partitions_is_exact(seed: int) -> None:
    rng = np.random.default_rng(seed)
    xs, ys = _pairs(rng, int(rng.integers(0, 400)))
    whole = Density2D.of(X, Y, xs, ys)
    parts = [Density2D.of(X, Y, xs[p], ys[p]) for p in _random_partition(rng, len(xs))]
    rng.shuffle(parts)
    merged = Density2D.empty(X, Y)
    for part in parts:
        merged = merged.merge(part)
    assert np.array_equal(merged.counts, whole.counts)


def test_density_merge_rejects_other_axes() -> None:
    with pytest.raises(ValueError, match="different axes"):
        Density2D.empty(X, Y).merge(Density2D.empty(Y, X))


# --- segments -------------------------------------------------------------------------------


def _tokens(rng: np.random.Generator, n_seq: int) -> tuple[np.ndarray, ...]:
    """Whole sequences in order: turns ascending within each (first turn, then later turns)."""
    seq, kind, step, lr, lt = [], [], [], [], []
    for s in range(n_seq):
        n = int(rng.integers(1, 12))
        turns = np.sort(rng.integers(0, 3, n))
        seq += [s] * n
        kind += (turns >= 1).astype(int).tolist()
        step += [s // 4] * n
        lr += (-rng.exponential(1.0, n)).tolist()
        lt += (-rng.exponential(1.0, n)).tolist()
    return tuple(np.array(a) for a in (seq, kind, step, lr, lt))


def _reference_segments(seq, kind, step, lr, lt) -> dict[tuple[int, int], tuple]:
    out: dict[tuple[int, int], list] = {}
    for i in range(len(seq)):
        out.setdefault((int(seq[i]), int(kind[i])), []).append(i)
    return {
        key: (int(step[idx[0]]), len(idx), -np.mean(lr[idx]), -np.mean(lt[idx]))
        for key, idx in out.items()
    }


def _as_dict(segs: Segments) -> dict[tuple[int, int], tuple]:
    return {
        (int(segs.seq[i]), int(segs.kind[i])): (
            int(segs.step[i]),
            int(segs.tokens[i]),
            segs.rollout_log_ppl[i],
            segs.trainer_log_ppl[i],
        )
        for i in range(len(segs))
    }


def test_segments_match_reference_in_order_and_shuffled() -> None:
    rng = np.random.default_rng(2)
    cols = _tokens(rng, 40)
    expected = _reference_segments(*cols)
    for order in (np.arange(len(cols[0])), rng.permutation(len(cols[0]))):
        got = _as_dict(segments(*(c[order] for c in cols)))
        assert got.keys() == expected.keys()
        for key, (step, n, rlp, tlp) in expected.items():
            assert got[key][:2] == (step, n)
            assert got[key][2] == pytest.approx(rlp, rel=1e-12)
            assert got[key][3] == pytest.approx(tlp, rel=1e-12)


def test_segments_of_nothing() -> None:
    empty = np.zeros(0)
    assert len(segments(empty, empty, empty, empty, empty)) == 0


# --- priorities and the bottom-k sample -----------------------------------------------------


def _splitmix_finalizer(x: int) -> int:
    """Pure-Python reference of splitmix64's finalizer."""
    mask = (1 << 64) - 1
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & mask
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & mask
    return x ^ (x >> 31)


def test_priorities_are_a_fixed_function_of_run_seq_kind_and_seed() -> None:
    values = [0, 1, 2, 12345, (1 << 63) + 7]
    assert mix64(np.array(values, dtype=np.uint64)).tolist() == [
        _splitmix_finalizer(v) for v in values
    ]
    seq, kind = np.array([0, 0, 5]), np.array([0, 1, 1])
    p = priorities("run-a", seq, kind, seed=0)
    assert np.array_equal(p, priorities("run-a", seq, kind, seed=0))
    assert len(set(p.tolist())) == 3
    assert not np.array_equal(p, priorities("run-a", seq, kind, seed=1))
    assert not np.array_equal(p, priorities("run-b", seq, kind, seed=0))
    assert int(run_hash("run-a", 0)) == int.from_bytes(
        hashlib.blake2b(b"0\0run-a", digest_size=8).digest(), "little"
    )


def _segments_of_run(rng: np.random.Generator, n_seq: int) -> Segments:
    return segments(*_tokens(rng, n_seq))


def _assert_same_sample(a: SegmentSample, b: SegmentSample) -> None:
    for name in (*SAMPLE_FIELDS, "rollout_log_ppl", "trainer_log_ppl"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def _reference_sample(runs: dict[str, Segments], k: int, seed: int) -> list[tuple]:
    rows = []
    for run, segs in runs.items():
        prio = priorities(run, segs.seq, segs.kind, seed)
        rows += [(int(segs.kind[i]), int(prio[i]), run, int(segs.seq[i])) for i in range(len(segs))]
    rows.sort()
    out, per_kind = [], {}
    for row in rows:
        per_kind[row[0]] = per_kind.get(row[0], 0) + 1
        if per_kind[row[0]] <= k:
            out.append(row)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_sample_merge_of_random_partitions_equals_one_shot(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 30))
    runs = {name: _segments_of_run(rng, int(rng.integers(0, 60))) for name in ("a", "b")}
    one_shot = SegmentSample.empty(k, seed)
    parts = []
    for run, segs in runs.items():
        one_shot = one_shot.merge(SegmentSample.of(run, segs, k, seed))
        for p in _random_partition(rng, len(segs)):
            sub = Segments(*(getattr(segs, f)[p] for f in Segments.__dataclass_fields__))
            parts.append(SegmentSample.of(run, sub, k, seed))
    for _ in range(3):  # any order of merging, and as a tree rather than a chain
        rng.shuffle(parts)
        merged = _tree_merge(parts, k, seed)
        _assert_same_sample(merged, one_shot)
    got = list(zip(one_shot.kind, one_shot.priority, one_shot.run, one_shot.seq, strict=True))
    assert [(int(a), int(b), c, int(d)) for a, b, c, d in got] == _reference_sample(runs, k, seed)


def _tree_merge(parts: list[SegmentSample], k: int, seed: int) -> SegmentSample:
    if not parts:
        return SegmentSample.empty(k, seed)
    while len(parts) > 1:
        parts = [
            parts[i].merge(parts[i + 1]) if i + 1 < len(parts) else parts[i]
            for i in range(0, len(parts), 2)
        ]
    return parts[0]


def test_sample_keeps_k_per_kind_and_is_reproducible() -> None:
    segs = _segments_of_run(np.random.default_rng(3), 500)
    a = SegmentSample.of("r", segs, k=25, seed=9)
    b = SegmentSample.of("r", segs, k=25, seed=9)
    _assert_same_sample(a, b)
    assert np.bincount(a.kind).tolist() == [25, 25]
    other = SegmentSample.of("r", segs, k=25, seed=10)
    assert set(a.seq.tolist()) != set(other.seq.tolist())


def test_sample_ties_are_broken_by_run_then_seq() -> None:
    def tied(order: list[int]) -> SegmentSample:
        base = SegmentSample.empty(k=2)
        runs = np.array(["b", "a", "a"], dtype=object)[order]
        seqs = np.array([1, 7, 3])[order]
        n = len(order)
        zeros = np.zeros(n, np.int64)
        equal = np.full(n, 5, np.uint64)  # every priority the same
        ones = np.ones(n, np.int64)
        tie = SegmentSample(2, 0, equal, runs, seqs, zeros, zeros, ones, zeros * 1.0, zeros * 1.0)
        return base.merge(tie)

    first, second = tied([0, 1, 2]), tied([2, 0, 1])
    _assert_same_sample(first, second)
    assert list(zip(first.run, first.seq.tolist(), strict=True)) == [("a", 3), ("a", 7)]


def test_sample_rejects_mismatched_merges_and_bad_k() -> None:
    with pytest.raises(ValueError, match="different k or seed"):
        SegmentSample.empty(5, 0).merge(SegmentSample.empty(6, 0))
    with pytest.raises(ValueError, match="k must be at least 1"):
        SegmentSample.empty(0)
