"""stats/signed_parts: the cells' sums against a direct computation, merged parts equal to one
pass, the one-signed test on tokens sampled from a small vocabulary (noise between two
distributions keeps the part's mean ratio at 1 however loud, a mask on the sampling side lowers
it by the banned mass), and the rate ratio at the same bins with its clustered interval."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import mismatchctl.stats.signed_parts as signed_parts_module
from mismatchctl.engines.keys import turn_positions
from mismatchctl.stats import per_token
from mismatchctl.stats.positions import assign_positions
from mismatchctl.stats.signed_parts import (
    GROUPS,
    HASH,
    TURN_POSITION_EDGES,
    SignedParts,
    SliceSums,
    one_signed,
    rate_ratio,
    signed_parts,
)
from mismatchctl.stats.splits import turn_index
from mismatchctl.stats.whatif import RATIO_LOG_CLAMP

VOCAB = 40
KV_EDGES = (0, 16, 32)  # KV positions 0-15, 16-31, 32+
LEVELS = (4, len(KV_EDGES), len(TURN_POSITION_EDGES), 4)  # turn, KV, position in turn, bin


def _sums(r: np.ndarray, seq: np.ndarray, turn: np.ndarray, kv: np.ndarray, bins: np.ndarray):
    return signed_parts("a", r, per_token.k3(r), seq, turn, kv, bins, KV_EDGES, LEVELS[3])


def _columns(rng: np.random.Generator, n_seqs: int, n: int) -> tuple[np.ndarray, ...]:
    """Whole sequences in order, 1-3 turns each (turns 0, 2, 4: the turn index caps at 3+),
    KV positions running from a prompt length, four probability bins."""
    seq = np.sort(rng.integers(0, n_seqs, n))
    turn = np.zeros(n, np.int8)
    for s in np.unique(seq):
        at = np.flatnonzero(seq == s)
        turn[at] = 2 * np.minimum(np.arange(len(at)) // rng.integers(3, 30), 2)
    kv = rng.integers(0, 12, n) + np.arange(n) % 40
    return seq, turn, kv, rng.integers(0, 4, n)


def _group(seq: np.ndarray) -> np.ndarray:
    return ((seq.astype(np.uint64) * np.uint64(HASH)) >> np.uint64(58)).astype(np.int64)


def _reference(r, seq, turn, kv, bins) -> np.ndarray:
    """The sums as numpy computes them: the cells from the splits' own functions, one
    ``bincount`` (token order) per sum."""
    k3 = per_token.k3(r)
    codes = (
        turn_index(turn),
        np.searchsorted(np.asarray(KV_EDGES[1:]), kv, side="right"),
        assign_positions(turn_positions(seq, turn), TURN_POSITION_EDGES),
        bins,
    )
    flat = _group(seq)
    for code, size in zip(codes, LEVELS, strict=True):
        flat = flat * size + code
    ok = np.isfinite(r)
    flat, r, k3 = flat[ok], r[ok], k3[ok]
    size = GROUPS * int(np.prod(LEVELS))
    q = per_token.expm1(np.clip(r, -RATIO_LOG_CLAMP, RATIO_LOG_CLAMP))
    out = [np.bincount(flat, w, minlength=size) for w in (None, r < 0, q, k3)]
    return np.stack(out, axis=1).reshape(GROUPS, *LEVELS, 4)


def test_the_compiled_walk_gives_numpys_sums_bit_for_bit() -> None:
    rng = np.random.default_rng(7)
    seq, turn, kv, bins = _columns(rng, 300, 4000)
    r = rng.normal(0, 0.05, len(seq))
    r[::50] = np.nan  # a token without a finite r is left out, and still counts in its turn
    sums = _sums(r, seq, turn, kv, bins).dense("a")
    assert np.array_equal(sums, _reference(r, seq, turn, kv, bins))
    with pytest.raises(ValueError, match="turn indices must be >= 0"):
        _sums(r, seq, turn.astype(np.int64) - 1, kv, bins)


def test_a_thread_s_slices_in_turn_each_hold_only_their_own_sums(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The walk's table is the thread's own, kept zeroed between slices: each slice of a series
    (and a slice again after one whose walk failed) gives numpy's sums of its tokens alone."""
    rng = np.random.default_rng(5)
    for n_seqs in (120, 7, 60):
        seq, turn, kv, bins = _columns(rng, n_seqs, 40 * n_seqs)
        r = rng.normal(0, 0.05, len(seq))
        got = _sums(r, seq, turn, kv, bins).dense("a")
        assert np.array_equal(got, _reference(r, seq, turn, kv, bins))
    with monkeypatch.context() as m:

        def half_way(*args: np.ndarray) -> int:  # adds to the table, then fails
            args[-2][:5] += 1.0
            raise KeyboardInterrupt

        m.setattr(signed_parts_module, "signed_cell_sums", half_way)
        with pytest.raises(KeyboardInterrupt):
            _sums(r, seq, turn, kv, bins)
    assert np.array_equal(_sums(r, seq, turn, kv, bins).dense("a"), got)


def test_a_slice_lists_the_rows_its_finite_tokens_reach_ascending() -> None:
    """The walk lists each row as it first reaches it: the rows whose token count is not 0,
    ascending, once each; a row only a non-finite token falls in is not reached."""
    rng = np.random.default_rng(11)
    seq, turn, kv, bins = _columns(rng, 40, 600)
    r = rng.normal(0, 0.05, len(seq))
    r[-30:] = np.nan  # the last sequences' cells: no finite token
    part = _sums(r, seq, turn, kv, bins).runs["a"]
    assert isinstance(part, SliceSums)
    counts = _reference(r, seq, turn, kv, bins)[..., 0].reshape(-1)
    assert np.array_equal(part.rows, np.flatnonzero(counts))
    assert np.array_equal(part.sums[:, 0], counts[part.rows])
    empty = _sums(r[:0], seq[:0], turn[:0], kv[:0], bins[:0]).runs["a"]
    assert isinstance(empty, SliceSums) and len(empty.rows) == 0


def test_each_cell_and_group_holds_its_tokens_sums() -> None:
    rng = np.random.default_rng(1)
    seq, turn, kv, bins = _columns(rng, 300, 3000)
    r = rng.normal(0, 0.05, len(seq))
    r[::50] = np.nan
    k3 = per_token.k3(r)
    sums = _sums(r, seq, turn, kv, bins).dense("a")
    assert sums.shape == (GROUPS, *LEVELS, 4)
    ok = np.isfinite(r)
    first = _group(seq[:1])[0]
    at = np.flatnonzero(ok & (_group(seq) == first))
    for i in at[:40]:
        mine = ok & (_group(seq) == first) & (turn.clip(0, 3) == min(turn[i], 3))
        mine &= (kv >= 16) == (kv[i] >= 16)
        mine &= (kv >= 32) == (kv[i] >= 32)
        mine &= bins == bins[i]
        runs = np.r_[True, (seq[1:] != seq[:-1]) | (turn[1:] != turn[:-1])]
        start = np.maximum.accumulate(np.where(runs, np.arange(len(seq)), 0))
        inner = np.arange(len(seq)) - start
        edges = np.asarray(TURN_POSITION_EDGES[1:])
        mine &= (inner[:, None] >= edges).sum(1) == (inner[i] >= edges).sum()
        cell = (first, min(turn[i], 3), int(kv[i] >= 16) + int(kv[i] >= 32))
        cell += (int((inner[i] >= edges).sum()), int(bins[i]))
        expect = [mine.sum(), (r[mine] < 0).sum(), np.expm1(r[mine]).sum(), k3[mine].sum()]
        assert np.allclose(sums[cell], expect)
    assert sums[..., 0].sum() == ok.sum()
    assert len(np.unique(_group(seq))) > GROUPS // 2  # the ids spread over the groups


def test_parts_merged_equal_one_pass() -> None:
    rng = np.random.default_rng(2)
    seq, turn, kv, bins = _columns(rng, 40, 1200)
    r = rng.normal(-0.01, 0.05, len(seq))
    cut = int(np.searchsorted(seq, 20))
    halves = [
        _sums(r[s], seq[s], turn[s], kv[s], bins[s]) for s in (slice(0, cut), slice(cut, None))
    ]
    merged = SignedParts().merge(halves[1]).merge(halves[0])
    whole = _sums(r, seq, turn, kv, bins)
    assert np.allclose(merged.dense("a"), whole.dense("a"))
    other = signed_parts("b", r, per_token.k3(r), seq, turn, kv, bins, KV_EDGES, LEVELS[3])
    both = merged.merge(other).total()
    assert both is not None and np.allclose(both, 2 * whole.dense("a"))
    assert SignedParts().total() is None


def _sampled(rng: np.random.Generator, n: int, noise: float, banned: bool) -> np.ndarray:
    """``r = log p(t) - log q(t)`` of ``n`` tokens ``t`` sampled from the rollout side's ``q``:
    ``p`` the trainer's logits with noise of scale ``noise``; ``banned``: ``q`` without its
    likeliest token but one (a bad-words mask on the sampling side), renormalised."""
    logits = rng.normal(0, 2.0, (n, VOCAB))
    logq = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    noisy = logits + rng.normal(0, noise, (n, VOCAB))
    logp = noisy - np.logaddexp.reduce(noisy, axis=1, keepdims=True)
    if banned:
        ban = np.argsort(logq, axis=1)[:, -2]
        logq[np.arange(n), ban] = -np.inf
        logq -= np.logaddexp.reduce(logq, axis=1, keepdims=True)
    q = np.exp(logq)
    t = (q.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1).clip(0, VOCAB - 1)
    t = np.where(np.isfinite(logq[np.arange(n), t]), t, np.argmax(logq, axis=1))
    return logp[np.arange(n), t] - logq[np.arange(n), t]


def _run(rng: np.random.Generator, noise_part: float, banned: bool) -> tuple:
    """Sequences of 40 tokens: the first 10 of each (position in the turn 0) are the part, with
    louder noise (a path) or a mask (a logit processor) there; the rest healthy noise."""
    seq = np.repeat(np.arange(120), 40)
    part = np.tile(np.arange(40) < 8, 120)  # the first bin of the position in the turn
    r = _sampled(rng, len(seq), 0.05, False)
    r[part] = _sampled(rng, int(part.sum()), noise_part, banned)
    bins = np.digitize(np.exp(-np.abs(r)), [0.5, 0.9])  # a stand-in for the probability bins
    zero = np.zeros(len(seq), np.int64)
    sums = _sums(r, seq, zero, zero, bins).dense("a")
    cells = np.indices(LEVELS)[2] == 0
    return sums, cells


def test_a_louder_noise_keeps_the_mean_ratio_a_mask_lowers_it() -> None:
    rng = np.random.default_rng(3)
    loud = one_signed(*_run(rng, 0.6, banned=False))
    assert loud is not None and loud.excess_k3 > 0
    assert abs(loud.deficit_z) < 3 and loud.deficit_per_k3 < 1.5
    mask = one_signed(*_run(rng, 0.05, banned=True))
    assert mask is not None and mask.excess_k3 > 0
    assert mask.deficit_z < -3 and mask.deficit_per_k3 > 4
    assert mask.below > mask.below_expected and mask.below_z > 3


def test_no_bin_with_rest_tokens_measures_nothing() -> None:
    rng = np.random.default_rng(4)
    seq = np.repeat(np.arange(4), 10)
    r = rng.normal(0, 0.05, len(seq))
    zero = np.zeros(len(seq), np.int64)
    sums = _sums(r, seq, zero, zero, seq % 4).dense("a")
    assert one_signed(sums, np.ones(LEVELS, bool)) is None


def test_a_rate_ratio_at_the_same_bins_with_a_clustered_interval() -> None:
    """A part at 3x the reference's K3 in every bin: the ratio is 3 whatever its bin mix, the
    interval holds it and shrinks with more sequences; no reference tokens, no ratio."""
    rng = np.random.default_rng(5)
    found, sums = [], None
    for seqs in (40, 400):
        seq = np.repeat(np.arange(seqs), 30)
        part = np.tile(np.arange(30) < 8, seqs)  # the first bin of the position in the turn
        bins = rng.integers(0, 3, len(seq))
        r = rng.normal(0, 0.02 * (1 + bins), len(seq)) * np.where(part, np.sqrt(3), 1)
        zero = np.zeros(len(seq), np.int64)
        sums = _sums(r, seq, zero, zero, bins).dense("a")
        position = np.indices(LEVELS)[2]
        found.append(rate_ratio(sums, position == 0, position >= 1))
    small, large = found
    assert small is not None and large is not None
    assert large.ci[0] < large.ratio < large.ci[1] and abs(large.ratio - 3) < 0.3
    assert large.ci[1] - large.ci[0] < small.ci[1] - small.ci[0]
    assert large.tokens == 400 * 8
    assert sums is not None and rate_ratio(sums, position == 0, position == 3) is None


def test_a_slices_sparse_sums_merge_as_the_dense_tables_add() -> None:
    """A slice's state holds only the rows its tokens reach; merged in any mix with dense
    tables (a part's, the fold's) it gives the dense tables' ``+`` to the bit, and merging
    leaves its inputs as they were."""
    rng = np.random.default_rng(4)
    seq, turn, kv, bins = _columns(rng, 60, 3000)
    r = rng.normal(-0.01, 0.05, len(seq))
    cuts = [0, *np.searchsorted(seq, [15, 30, 45]).tolist(), len(seq)]
    slices = [
        _sums(r[a:b], seq[a:b], turn[a:b], kv[a:b], bins[a:b]) for a, b in itertools.pairwise(cuts)
    ]
    first = slices[0].runs["a"]
    assert isinstance(first, SliceSums) and 0 < len(first.rows) < first.dense()[..., 0].size // 10
    dense = [s.dense("a") for s in slices]
    want = ((dense[0] + dense[1]) + (dense[2] + dense[3])) + dense[0]
    before = [s.dense("a").copy() for s in slices]
    left = slices[0].merge(slices[1])  # sparse + sparse
    right = SignedParts({"a": dense[2]}).merge(slices[3])  # dense + sparse
    both = left.merge(right).merge(slices[0])
    assert np.array_equal(both.dense("a"), want)
    assert np.array_equal(
        slices[3].merge(SignedParts({"a": dense[2]})).dense("a"), dense[2] + dense[3]
    )
    assert all(np.array_equal(s.dense("a"), b) for s, b in zip(slices, before, strict=True))


def test_a_running_total_takes_the_slices_in_place_unless_read_only() -> None:
    """``merge_into`` (the engine's fold) adds into the total's own table, with ``merge``'s
    values; a read-only table (a state from Ray's object store) is copied, not written."""
    rng = np.random.default_rng(5)
    seq, turn, kv, bins = _columns(rng, 30, 1500)
    r = rng.normal(-0.01, 0.05, len(seq))
    cut = int(np.searchsorted(seq, 15))
    a, b = (
        _sums(r[:cut], seq[:cut], turn[:cut], kv[:cut], bins[:cut]),
        _sums(r[cut:], seq[cut:], turn[cut:], kv[cut:], bins[cut:]),
    )
    want = a.merge(b).merge(b).dense("a")
    total = a.merge_into(b)  # a slice's sums: a new table
    table = total.runs["a"]
    assert isinstance(table, np.ndarray)
    again = total.merge_into(b)
    assert again.runs["a"] is table and np.array_equal(table, want)
    frozen = a.merge(b).dense("a")
    frozen.flags.writeable = False
    kept = frozen.copy()
    out = SignedParts({"a": frozen}).merge_into(b)
    assert np.array_equal(frozen, kept) and np.array_equal(out.dense("a"), want)


def test_the_callers_clamped_ratio_gives_the_same_sums_and_the_offsets_q() -> None:
    """diagnose hands the signed parts and the offset one ``clamped_ratio`` of the slice: its
    values are each one's own ``expm1(clip(r))``, and the sums the same bits as without it."""
    from mismatchctl.stats.offset import offset_state
    from mismatchctl.stats.signed_parts import clamped_ratio

    rng = np.random.default_rng(9)
    seq, turn, kv, bins = _columns(rng, 200, 3000)
    r = rng.normal(0, 0.05, len(seq))
    r[::97] = 40.0  # beyond the clamp
    ratio = clamped_ratio(r)
    np.testing.assert_array_equal(
        ratio, per_token.expm1(np.clip(r, -RATIO_LOG_CLAMP, RATIO_LOG_CLAMP))
    )
    k3 = per_token.k3(r)
    given = signed_parts("a", r, k3, seq, turn, kv, bins, KV_EDGES, LEVELS[3], ratio)
    assert np.array_equal(given.dense("a"), _sums(r, seq, turn, kv, bins).dense("a"))
    lr = -rng.exponential(1.0, len(seq))
    lt = lr + r
    own = offset_state(lr, lt, seq)
    np.testing.assert_array_equal(
        offset_state(lr, lt, seq, lt - lr, None, clamped_ratio(lt - lr)), own
    )
