"""The numpy pieces of `diagnose` against direct references: lag co-moments and their merge,
the regression, sequence-clustered offsets, median/MAD z, Theil-Sen, Spearman, sentinels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mismatchctl.stats.comoments import (
    correlation,
    lag_k3,
    lag_pairs,
    lag_states,
    merge_pairs,
    pair_state,
    regression,
    shifted_pairs,
)
from mismatchctl.stats.offset import N_FIELDS, offset_state, offset_summary
from mismatchctl.stats.robust import ranks, robust_z, spearman, theil_sen
from mismatchctl.stats.sentinels import PAD_RUN_MIN, sentinel_state, trailing_zero_state


def test_pair_merge_with_empty_and_single_parts() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.normal(5.0, 2.0, 50), rng.normal(-3.0, 1.0, 50)
    y += 0.7 * x
    total = np.zeros(6)
    for lo, hi in [(0, 0), (0, 1), (1, 1), (1, 20), (20, 50)]:
        total = merge_pairs(total, pair_state(x[lo:hi], y[lo:hi]))
    assert total == pytest.approx(pair_state(x, y), rel=1e-10)
    assert correlation(total) == pytest.approx(np.corrcoef(x, y)[0, 1], rel=1e-12)
    slope, intercept = np.polyfit(x, y, 1)
    reg = regression(total)
    assert reg["slope"] == pytest.approx(slope, rel=1e-10)
    assert reg["intercept"] == pytest.approx(intercept, rel=1e-10)
    d = y - x
    want_r2 = np.corrcoef(x, d)[0, 1] ** 2
    assert reg["diff_r2"] == pytest.approx(want_r2, rel=1e-10)


def test_correlation_undefined() -> None:
    assert correlation(pair_state(np.array([1.0]), np.array([2.0]))) is None
    assert correlation(pair_state(np.ones(4), np.arange(4.0))) is None
    assert regression(np.zeros(6))["slope"] is None


def test_lags_pair_within_turns_only() -> None:
    """Two sequences, the second with two turns: pairs never cross a sequence or a turn."""
    lr = np.array([1.0, 2.0, 3.0, 10.0, 20.0, 30.0, 40.0])
    lt = lr * 10
    seq = np.array([0, 0, 0, 1, 1, 1, 1])
    turn = np.array([0, 0, 0, 0, 0, 1, 1])
    lag0, plus, minus = lag_states(lag_pairs(lr, lt, seq, turn))
    assert lag0 == pytest.approx(pair_state(lr, lt))
    # adjacent pairs: (0,1), (1,2), (3,4), (5,6)
    assert plus == pytest.approx(
        pair_state(np.array([1, 2, 10, 30.0]), np.array([20, 30, 200, 400.0]))
    )
    assert minus == pytest.approx(
        pair_state(np.array([2, 3, 20, 40.0]), np.array([10, 20, 100, 300.0]))
    )


def test_shift_is_seen_at_lag_plus_one() -> None:
    rng = np.random.default_rng(1)
    lr = -rng.exponential(1.0, 2000)
    seq = np.repeat(np.arange(40), 50)
    lt = np.r_[0.0, lr[:-1]]  # the trainer's value of token t sits at t + 1
    states = lag_states(lag_pairs(lr, lt, seq, np.zeros(2000, np.int64)))
    assert correlation(states[1]) > 0.99 > 0.1 > abs(correlation(states[0]))


def _sides_with_sentinels(seed: int) -> tuple[np.ndarray, ...]:
    """Sequences of one or two turns whose trainer side holds a few sentinel values (-9999,
    0.0 fills, a NaN): shifted pairs whose ``|r|`` passes the clamp."""
    rng = np.random.default_rng(seed)
    seq = np.repeat(np.arange(30), rng.integers(1, 40, 30))
    turn = (rng.random(len(seq)) < 0.3).cumsum() % 2
    lr = -rng.exponential(1.0, len(seq))
    lt = lr + 0.01 * rng.standard_normal(len(seq))
    lt[rng.choice(len(seq), 6, replace=False)] = -9999.0
    lt[rng.choice(len(seq), 6, replace=False)] = 0.0
    lt[7] = np.nan
    return lr, lt, seq, turn


def test_lag_k3_against_the_pairs_within_turns() -> None:
    """Each lag's pairs and K3 sum against a plain loop over the pairs within a turn, and the
    slice's shared shifted pairs give the same bits as the lag's own vectors."""
    lr, lt, seq, turn = _sides_with_sentinels(2)
    lt[7] = lt[6]  # the reference below sums finite values only
    pairs = lag_pairs(lr, lt, seq, turn)
    own = lag_k3(pairs)
    same = [i for i in range(len(seq) - 1) if seq[i] == seq[i + 1] and turn[i] == turn[i + 1]]
    for lag, (a, b) in ((1, (1, 0)), (2, (0, 1))):
        k = [math.expm1(lt[i + a] - lr[i + b]) - (lt[i + a] - lr[i + b]) for i in same]
        assert own[lag, 0] == len(same)
        assert own[lag, 1] == pytest.approx(math.fsum(k), rel=1e-12)
    assert own[0, 1] == pytest.approx(math.fsum(np.expm1(lt - lr) - (lt - lr)), rel=1e-12)
    shifted = shifted_pairs(lr, lt, seq, turn)
    np.testing.assert_array_equal(lag_k3(pairs, None, shifted), own)
    np.testing.assert_array_equal(shifted.adjacent, np.isin(np.arange(len(seq) - 1), same))


def test_lag_k3_with_the_shared_pairs_keeps_nan_and_inf() -> None:
    lr, lt, seq, turn = _sides_with_sentinels(3)
    lt[20] = 800.0  # expm1 overflows: +inf
    pairs = lag_pairs(lr, lt, seq, turn)
    shifted = shifted_pairs(lr, lt, seq, turn)
    np.testing.assert_array_equal(
        lag_k3(pairs, None, shifted), lag_k3(pairs)
    )  # NaN where a NaN or inf - inf entered, as before
    np.testing.assert_array_equal(
        lag_states(lag_pairs(lr, lt, seq, turn, shifted.adjacent)), lag_states(pairs)
    )


def test_offset_and_trailing_zeros_with_the_callers_r_and_starts() -> None:
    """The engine hands in the slice's ``r`` and sequence starts (``PartKeys``): the same sums,
    bit for bit, as each state's own."""
    lr, lt, seq, _ = _sides_with_sentinels(4)
    lt[7] = lt[6]
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    ends = np.r_[starts[1:], len(seq)]
    for b in [b for a, b in zip(starts, ends, strict=True) if b - a > PAD_RUN_MIN][:5]:
        lr[b - PAD_RUN_MIN : b] = lt[b - PAD_RUN_MIN : b] = 0.0  # padding stored as tokens
    step = seq // 3
    np.testing.assert_array_equal(
        offset_state(lr, lt, seq, lt - lr, starts), offset_state(lr, lt, seq)
    )
    own = trailing_zero_state(lr, lt, seq, step, "a")
    assert trailing_zero_state(lr, lt, seq, step, "a", starts) == own
    assert own.sequences == len(starts) and own.padded > 0


def _clustered(r_by_seq: list[np.ndarray]) -> tuple[float, float]:
    """Ratio-estimator mean and standard error, written out per sequence."""
    s = np.array([r.sum() for r in r_by_seq])
    t = np.array([len(r) for r in r_by_seq], dtype=float)
    m = s.sum() / t.sum()
    k = len(s)
    se = math.sqrt(k / (k - 1) * np.sum((s - m * t) ** 2)) / t.sum()
    return m, se


def test_offset_matches_clustered_reference_and_merges() -> None:
    rng = np.random.default_rng(2)
    lens = rng.integers(1, 30, 60)
    lr = [-rng.exponential(1.0, n) for n in lens]
    lt = [x + rng.normal(-0.05, 0.1, len(x)) for x in lr]
    seq = np.repeat(np.arange(60), lens)
    flat_lr, flat_lt = np.concatenate(lr), np.concatenate(lt)
    cut = int(lens[:25].sum())
    state = offset_state(flat_lr[:cut], flat_lt[:cut], seq[:cut])
    state = state + offset_state(flat_lr[cut:], flat_lt[cut:], seq[cut:]) + np.zeros(N_FIELDS)
    got = offset_summary(state)
    m, se = _clustered([b - a for a, b in zip(lr, lt, strict=True)])
    assert got["log_ratio_mean"] == pytest.approx(m, rel=1e-12)
    assert got["log_ratio_se"] == pytest.approx(se, rel=1e-9)
    q, qse = _clustered([np.expm1(b - a) for a, b in zip(lr, lt, strict=True)])
    assert got["ratio_mean"] == pytest.approx(1 + q, rel=1e-12)
    assert got["ratio_z"] == pytest.approx(q / qse, rel=1e-9)
    r = flat_lt - flat_lr
    assert got["k3_mean"] == pytest.approx(float(np.mean(np.expm1(r) - r)), rel=1e-9)
    assert got["negative_share"] == pytest.approx((r < 0).sum() / (r != 0).sum())


def test_offset_needs_two_sequences() -> None:
    got = offset_summary(offset_state(np.array([-1.0, -2.0]), np.array([-1.5, -2.0]), np.zeros(2)))
    assert got["log_ratio_mean"] == pytest.approx(-0.25)
    assert got["log_ratio_se"] is None and got["log_ratio_z"] is None
    assert got["negative_share"] == 1.0


def test_robust_z() -> None:
    z, median, scale = robust_z(np.array([1.0, 2.0, 3.0, 4.0, 100.0]))
    # median 3, |dev| = [2, 1, 0, 1, 97] -> MAD 1, scale 1.4826
    assert (median, scale) == (3.0, pytest.approx(1.4826))
    assert z[-1] == pytest.approx(97 / 1.4826)
    z, _, scale = robust_z(np.array([5.0, 5.0, 5.0, 5.0, 9.0]))  # MAD 0: mean abs dev stands in
    assert scale == pytest.approx(math.sqrt(math.pi / 2) * 0.8)
    z, _, _ = robust_z(np.array([2.0, 2.0, 2.0]))
    assert list(z) == [0.0, 0.0, 0.0]


def test_theil_sen_against_all_pairs() -> None:
    x = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    y = np.array([0.0, 1.0, 2.0, 30.0, 4.0, 5.0])  # one outlier does not move the slope
    slopes = [(y[j] - y[i]) / (x[j] - x[i]) for i in range(6) for j in range(i + 1, 6)]
    got = theil_sen(x, y)
    assert got["slope"] == pytest.approx(float(np.median(slopes)))
    assert got["slope"] == pytest.approx(1.0)
    assert got["positive_share"] == pytest.approx(np.mean(np.array(slopes) > 0))
    assert theil_sen(np.ones(3), np.arange(3.0))["slope"] is None


@pytest.mark.parametrize("block", [1, 7, 1 << 16])
def test_theil_sen_by_blocks_of_rows_gives_the_slopes_of_all_pairs(
    monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """The pairs taken a block of rows at a time (a bounded memory): the same slopes in the
    same order as every pair at once, so the same median and share, to the bit; pairs of equal
    x left out."""
    from mismatchctl.stats import robust

    monkeypatch.setattr(robust, "PAIR_BLOCK", block)
    rng = np.random.default_rng(3)
    x = np.round(rng.random(150) * 40)  # ties in x: pairs without a slope
    y = 0.3 * x + rng.standard_normal(150)
    i, j = np.triu_indices(150, k=1)
    ok = x[j] != x[i]
    slopes = (y[j] - y[i])[ok] / (x[j] - x[i])[ok]
    np.testing.assert_array_equal(robust._pair_slopes(x, y), slopes)
    got = theil_sen(x, y)
    assert got["slope"] == float(np.median(slopes))
    assert got["positive_share"] == float(np.mean(slopes[slopes != 0] > 0))


def test_spearman_and_ranks() -> None:
    assert list(ranks(np.array([10.0, 20.0, 20.0, 5.0]))) == [2.0, 3.5, 3.5, 1.0]
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert spearman(x, np.exp(x)) == pytest.approx(1.0)
    assert spearman(x, -(x**3)) == pytest.approx(-1.0)
    # d = rank differences [0, 0, -1, 1, 0]: rho = 1 - 6 * 2 / (5 * 24) = 0.9
    assert spearman(x, np.array([1.0, 2.0, 4.0, 3.0, 5.0])) == pytest.approx(0.9)
    assert spearman(x[:2], x[:2]) is None


def test_sentinels() -> None:
    lr = np.array([-1.0, -2.0, -3.0, -1.5, -0.5, -1.0, -2.0, 0.0, -1.0, -1.0])
    lt = np.array([0.0, 0.0, 0.0, 0.0, -0.5, 0.0, -9999.0, -1e-9, -1.0, 0.0])
    seq = np.array([0, 0, 0, 0, 0, 1, 1, 1, 2, 2])
    turn = np.zeros(10, np.int64)
    s = sentinel_state(lr, lt, seq, turn, np.array([3] * 5 + [4] * 5), "run")
    # seq 0: a run of 4 one-sided trainer zeros reaching lr = -3; seqs 1 and 2: lone zeros,
    # and -9999 in 1; token 7: a rollout exactly 0 (one-sided, but alone)
    assert (s.zero_trainer, s.zero_rollout, s.zero_run_tokens) == (6, 1, 4)
    assert (s.low_trainer, s.low_rollout, s.offending) == (1, 0, 5)
    assert s.steps == {3: 4, 4: 1}
    assert s.examples == [("run", 3, 0, "0.0 run"), ("run", 4, 1, "<= -1000")]
    confident = np.array([-0.3, -0.1, -0.2, -0.4])  # a top-p nucleus of one token, 4 times
    near = sentinel_state(np.zeros(4), confident, np.zeros(4), np.zeros(4), np.zeros(4))
    assert (near.zero_rollout, near.zero_run_tokens) == (4, 0)
    merged = s.merge(s)
    assert merged.zero_run_tokens == 8 and merged.steps == {3: 8, 4: 2}
    assert merged.examples == s.examples


def test_sentinel_sides_against_a_plain_reference() -> None:
    """The tokens where neither side is 0.0 nor a sentinel and the sum of their rollout less
    trainer logprob, against numpy; the runs' side; ``sharper``: the runs' side over the other
    there, signed by the side, None with runs on both sides; merged states add up."""
    lr, lt, seq, turn = _sides_with_sentinels(5)
    lt[7] = lt[6]
    lt[40:46] = 0.0  # a trainer-side run (its rollout side reaches p <= 0.5 there or not)
    lr[40:46] = np.minimum(lr[40:46], -1.0)
    turn[40:46] = turn[40]
    seq[40:46] = seq[40]
    s = sentinel_state(lr, lt, seq, turn, np.zeros(len(seq), np.int64))
    both = (lr != 0.0) & (lt != 0.0) & (lr > -1000.0) & (lt > -1000.0)
    assert s.both_tokens == int(both.sum())
    assert s.both_diff == pytest.approx(math.fsum(lr[both] - lt[both]), rel=1e-12)
    assert s.zero_run_tokens >= 6 and s.zero_run_rollout == 0
    assert s.sharper == pytest.approx(-s.both_diff / s.both_tokens)
    flipped = sentinel_state(lt, lr, seq, turn, np.zeros(len(seq), np.int64))
    assert flipped.zero_run_rollout == flipped.zero_run_tokens == s.zero_run_tokens
    assert flipped.sharper == pytest.approx(s.sharper)
    merged = s.merge(flipped)
    assert merged.sharper is None and merged.both_tokens == 2 * s.both_tokens
    assert sentinel_state(lr[:5], lr[:5] - 0.1, seq[:5], turn[:5], seq[:5]).sharper is None
    last = np.r_[(seq[1:] != seq[:-1]) | (turn[1:] != turn[:-1]), True]
    zero = ((lr == 0.0) & (lt != 0.0) & (lt <= math.log(0.5))) | (
        (lt == 0.0) & (lr != 0.0) & (lr <= math.log(0.5))
    )
    assert (s.turn_ends, s.end_zeros, s.other_zeros) == (
        int(last.sum()),
        int((zero & last).sum()),
        int((zero & ~last).sum()),
    )
    assert merged.turn_ends == 2 * s.turn_ends and merged.other_zeros == 2 * s.other_zeros
