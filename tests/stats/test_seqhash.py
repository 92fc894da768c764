"""The compiled sequence hashes of the paired comparison equal their documented formula in numpy,
and tell apart sequences that differ in one id, one position or the order of two tokens."""

from __future__ import annotations

import numpy as np

from mismatchctl.stats.sample import mix64
from mismatchctl.stats.seqhash import _L0, _L1, _L2, sequence_hashes


def _reference(ids, position, rollout, starts):
    """``stats/seqhash.py``'s formula with numpy's wrapping uint64 arithmetic."""
    place = position.astype(np.uint64) * _L2
    v = mix64(mix64(ids.astype(np.int64).view(np.uint64) + _L0) ^ place)
    bits = rollout.astype(np.float64).view(np.uint64)
    return np.column_stack([
        np.add.reduceat(v, starts),
        np.add.reduceat(mix64(v ^ _L1), starts),
        np.add.reduceat(mix64(mix64(bits + _L1) ^ place), starts),
    ])  # fmt: skip


def _hash(ids, position, rollout, starts, missing=None):
    missing = np.zeros(len(ids), bool) if missing is None else missing
    return sequence_hashes(
        np.asarray(ids, np.int64).view(np.uint64), missing, np.asarray(position, np.int32),
        np.asarray(rollout, np.float64).view(np.uint64), np.asarray(starts, np.int64),
    )  # fmt: skip


def test_equals_the_formula() -> None:
    rng = np.random.default_rng(0)
    n = 5000
    ids = rng.integers(0, 200_000, n)
    position = np.concatenate([np.arange(k) for k in (1000, 1500, 2500)]).astype(np.int32)
    rollout = -rng.exponential(1.0, n)
    starts = np.array([0, 1000, 2500])
    missing = np.zeros(n, bool)
    missing[1700] = True
    got, complete = _hash(ids, position, rollout, starts, missing)
    np.testing.assert_array_equal(got, _reference(ids, position, rollout, starts))
    assert complete.tolist() == [True, False, True]


def test_tells_sequences_apart() -> None:
    base = np.array([5, 17, 17, 900, 3])
    pos = np.arange(5)
    lr = np.full(5, -0.5)
    h = _hash(base, pos, lr, [0])[0][0]
    assert (h == _hash(base.copy(), pos, lr, [0])[0][0]).all()
    one_id = base.copy()
    one_id[3] += 1
    swapped = base[[0, 1, 3, 2, 4]]
    later = pos + (pos >= 2)  # a masked position (a tool response) before the third token
    for ids, p in ((one_id, pos), (swapped, pos), (base, later)):
        other = _hash(ids, p, lr, [0])[0][0]
        assert (other[:2] != h[:2]).all()
    lr2 = lr.copy()
    lr2[4] = np.nextafter(-0.5, 0.0)  # one bit of one rollout logprob
    other = _hash(base, pos, lr2, [0])[0][0]
    assert (other[:2] == h[:2]).all() and other[2] != h[2]
