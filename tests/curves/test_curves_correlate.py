"""Statistics of training curves (issue #10): join, Pearson/Spearman, lead-lag, spikes, drops."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mismatchctl.curves.correlate import (
    MIN_LAG_PAIRS,
    LagPoint,
    align,
    best_lag,
    change_lead_lag,
    first_differences,
    fisher_interval,
    lead_lag,
    outer_join,
    pearson,
    spearman,
)
from mismatchctl.curves.events import (
    Coincidence,
    coincident_spikes,
    reward_drops,
    rise_before_drop,
    spikes,
    usable,
)
from tests.helpers import examples

# --- independent references: plain Python sums -------------------------------------------------


def ref_pearson(x: list[float], y: list[float]) -> float:
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy)


def ref_ranks(x: list[float]) -> list[float]:
    out = []
    for a in x:
        below = sum(1 for b in x if b < a)
        equal = sum(1 for b in x if b == a)
        out.append(below + (equal + 1) / 2)  # mean of ranks below+1 .. below+equal
    return out


def ref_spearman(x: list[float], y: list[float]) -> float:
    return ref_pearson(ref_ranks(x), ref_ranks(y))


Z95 = 1.959963984540054  # the 0.975 quantile of the standard normal


def ref_fisher(r: float, n: int) -> tuple[float, float]:
    """95% interval of a Pearson r of n pairs: tanh(atanh(r) -+ z / sqrt(n - 3))."""
    half = Z95 / math.sqrt(n - 3)
    return math.tanh(math.atanh(r) - half), math.tanh(math.atanh(r) + half)


def ref_changes(steps: list[int], values: list[float]) -> dict[int, float]:
    """value(s) - value(s - 1) at every step whose previous step is there too."""
    at = dict(zip(steps, values, strict=True))
    return {s: at[s] - at[s - 1] for s in steps if s - 1 in at}


def ref_change_lag(steps: list[int], x: list[float], y: list[float], k: int) -> tuple[float, int]:
    """Pearson r and n of (change of x at s, change of y at s + k), plain Python."""
    dx, dy = ref_changes(steps, x), ref_changes(steps, y)
    pairs = [(dx[s], dy[s + k]) for s in sorted(dx) if s + k in dy]
    return ref_pearson([a for a, _ in pairs], [b for _, b in pairs]), len(pairs)


def steps_of(n: int, start: int = 0) -> np.ndarray:
    return np.arange(start, start + n, dtype=np.int64)


# --- pearson / spearman ------------------------------------------------------------------------


def test_pearson_hand_computed() -> None:
    # mean y 4; sum dxdy 6, sum dx^2 10, sum dy^2 6: r = 6 / sqrt(60)
    r = pearson(np.array([1.0, 2, 3, 4, 5]), np.array([2.0, 4, 5, 4, 5]))
    assert r == pytest.approx(0.7745966692414834, abs=1e-15)
    assert pearson(np.array([1.0, 2, 3]), np.array([3.0, 2, 1])) == pytest.approx(-1.0, abs=1e-15)


def test_spearman_ties_hand_computed() -> None:
    # ranks x [1, 2.5, 2.5, 4], y [1, 3, 2, 4]: 4.5 / sqrt(4.5 * 5) = sqrt(0.9)
    r = spearman(np.array([1.0, 2, 2, 3]), np.array([10.0, 30, 20, 40]))
    assert r == pytest.approx(math.sqrt(0.9), abs=1e-15)
    # a monotone but non-linear relation: Spearman 1, Pearson below 1
    x = np.arange(1.0, 8.0)
    assert spearman(x, np.exp(x)) == pytest.approx(1.0, abs=1e-15)
    assert pearson(x, np.exp(x)) < 0.95


def test_against_plain_python_reference() -> None:
    rng = np.random.default_rng(7)
    for n in (3, 4, 10, 57):
        x = rng.normal(size=n)
        y = 0.3 * x + rng.normal(size=n)
        y_tied = np.round(y, 0)  # plenty of ties
        x_tied = np.round(x * 2, 0)
        assert pearson(x, y) == pytest.approx(ref_pearson(list(x), list(y)), abs=1e-12)
        assert spearman(x, y) == pytest.approx(ref_spearman(list(x), list(y)), abs=1e-12)
        if len(set(x_tied)) > 1 and len(set(y_tied)) > 1:
            expected = ref_spearman(list(x_tied), list(y_tied))
            assert spearman(x_tied, y_tied) == pytest.approx(expected, abs=1e-12)


def test_none_cases() -> None:
    assert pearson(np.array([1.0, 2]), np.array([1.0, 3])) is None  # fewer than 3 points
    assert pearson(np.array([]), np.array([])) is None
    assert spearman(np.array([1.0, 2]), np.array([2.0, 1])) is None
    assert pearson(np.full(5, 0.1), np.arange(5.0)) is None  # constant (inexact mean of 0.1s)
    assert pearson(np.arange(5.0), np.full(5, 3.0)) is None
    assert spearman(np.full(4, 7.0), np.arange(4.0)) is None
    with pytest.raises(ValueError):
        pearson(np.array([1.0, np.nan, 3]), np.array([1.0, 2, 3]))
    with pytest.raises(ValueError):
        pearson(np.array([1.0, 2, 3]), np.array([1.0, 2]))


# --- align -------------------------------------------------------------------------------------


def test_align_missing_steps_and_nonfinite() -> None:
    sx = np.array([0, 1, 2, 3, 5, 6, 8], dtype=np.int64)
    x = np.array([0.0, 1, np.nan, 3, 5, 6, 8])
    sy = np.array([1, 2, 3, 4, 5, 6, 7, 9], dtype=np.int64)
    y = np.array([10.0, 20, 30, 40, np.inf, 60, 70, 90])
    a = align(sx, x, sy, y)
    assert a.steps.tolist() == [1, 3, 6]
    assert a.x.tolist() == [1.0, 3.0, 6.0]
    assert a.y.tolist() == [10.0, 30.0, 60.0]
    assert a.steps.dtype == np.int64 and a.x.dtype == np.float64
    assert a.n == 3
    assert a.only_x_steps == [0, 8]
    assert a.only_y_steps == [4, 7, 9]
    assert a.nonfinite_steps == [2, 5]  # NaN on the x side at 2, inf on the y side at 5
    # every input step is accounted for exactly once
    union = set(sx.tolist()) | set(sy.tolist())
    parts = [a.steps.tolist(), a.only_x_steps, a.only_y_steps, a.nonfinite_steps]
    assert sorted(s for p in parts for s in p) == sorted(union)


def test_align_rejects_unsorted_steps() -> None:
    with pytest.raises(ValueError):
        align(np.array([0, 2, 1]), np.zeros(3), np.array([0, 1, 2]), np.zeros(3))
    with pytest.raises(ValueError):
        align(np.array([0, 1, 1]), np.zeros(3), np.array([0, 1, 2]), np.zeros(3))


def test_outer_join() -> None:
    steps, x, y = outer_join(np.array([0, 2]), np.array([1.0, 2]), np.array([1, 2]), [5.0, 6])
    assert steps.tolist() == [0, 1, 2]
    assert np.array_equal(x, [1.0, np.nan, 2.0], equal_nan=True)
    assert np.array_equal(y, [np.nan, 5.0, 6.0], equal_nan=True)


# --- lead-lag ----------------------------------------------------------------------------------


def signal(steps: np.ndarray) -> np.ndarray:
    """A noise-free, non-periodic curve: distinct values, no lag other than 0 correlates fully."""
    s = steps.astype(np.float64)
    return np.sin(0.7 * s) + 0.05 * s + np.cos(0.13 * s * s)


def test_lead_lag_shift_by_two() -> None:
    steps = steps_of(31)
    x = signal(steps)
    y = signal(steps - 2)  # y(s) = x(s - 2): x leads y by 2 steps
    points = lead_lag(steps, x, y)
    assert [p.lag for p in points] == list(range(-5, 6))
    at = {p.lag: p for p in points}
    assert at[2].r == pytest.approx(1.0, abs=1e-12)
    assert at[2].n == 29 and at[0].n == 31 and at[-5].n == 26
    best = best_lag(points)
    assert best is not None and best.lag == 2
    assert best.r == pytest.approx(1.0, abs=1e-12)
    assert all(p.r is not None and abs(p.r) < 0.99 for p in points if p.lag != 2)


def test_lead_lag_missing_step_is_step_based() -> None:
    full = steps_of(31)
    steps = full[full != 13]  # steps 0..30 without 13
    x = signal(steps)
    y = signal(steps - 2)
    at = {p.lag: p for p in lead_lag(steps, x, y)}
    best = best_lag(list(at.values()))
    assert best is not None and best.lag == 2
    assert best.r == pytest.approx(1.0, abs=1e-12)
    # pairs (s, s + 2) lose s = 11 (y side missing) and s = 13 (x side missing)
    assert at[2].n == 27
    # a position-based shift would misalign everything after the gap: not a perfect fit
    pos_r = pearson(x[:-2], y[2:])
    assert pos_r is not None and pos_r < 0.999


def test_lead_lag_sign_convention() -> None:
    steps = steps_of(40)
    x = signal(steps)
    # y moves first: y(s) = x(s + 3), i.e. x(s) = y(s - 3): y leads x by 3, peak at k = -3
    y = signal(steps + 3)
    best = best_lag(lead_lag(steps, x, y))
    assert best is not None and best.lag == -3
    # swapping the roles flips the sign
    best_swapped = best_lag(lead_lag(steps, y, x))
    assert best_swapped is not None and best_swapped.lag == 3
    # an anti-correlated lead keeps its lag, with r = -1
    best_neg = best_lag(lead_lag(steps, x, -signal(steps - 1)))
    assert best_neg is not None and best_neg.lag == 1
    assert best_neg.r == pytest.approx(-1.0, abs=1e-12)


def test_lead_lag_nonfinite_pairs_and_none() -> None:
    steps = steps_of(6)
    x = np.array([1.0, 2, np.nan, 4, 5, 6])
    y = np.array([1.0, 3, 2, 5, 4, 6])
    at = {p.lag: p for p in lead_lag(steps, x, y, lags=[0, 4, 5, 6])}
    assert at[0].n == 5 and at[0].r == pytest.approx(
        ref_pearson([1, 2, 4, 5, 6], [1, 3, 5, 4, 6]), abs=1e-12
    )
    assert (at[4].n, at[4].r) == (2, None)
    assert (at[5].n, at[5].r) == (1, None)
    assert (at[6].n, at[6].r) == (0, None)
    assert lead_lag(np.array([], dtype=np.int64), [], [], lags=[0, 1]) == [
        LagPoint(0, None, 0),
        LagPoint(1, None, 0),
    ]


def test_best_lag_ties_and_none() -> None:
    assert best_lag([]) is None
    assert best_lag([LagPoint(0, None, 2)]) is None
    tie = [LagPoint(-2, 0.8, 10), LagPoint(2, -0.8, 10), LagPoint(3, 0.8, 10), LagPoint(0, 0.5, 9)]
    assert best_lag(tie) == LagPoint(-2, 0.8, 10)  # smallest |lag|, then the negative one
    near = [LagPoint(4, 1.0, 10), LagPoint(1, 1.0 - 1e-14, 10)]
    assert best_lag(near) == LagPoint(1, 1.0 - 1e-14, 10)  # within BEST_LAG_TIE: shortest lag


# --- lead-lag of the step-to-step changes ------------------------------------------------------


def test_monotone_curves_do_not_correlate_through_their_trends() -> None:
    """Two curves that both rise over a run correlate almost fully in levels, at every lag; their
    step-to-step changes, drawn independently, do not: no lead is reported from the trends."""
    rng = np.random.default_rng(7)
    steps = steps_of(40)
    x = np.cumsum(rng.uniform(0.5, 1.5, 40))  # strictly increasing
    y = np.cumsum(rng.uniform(0.5, 1.5, 40)) ** 1.3
    assert pearson(x, y) > 0.99  # levels: the trend
    assert all(p.r > 0.99 for p in lead_lag(steps, x, y))  # levels at every lag: the trend again
    points = change_lead_lag(steps, x, y)
    for p in points:
        want, n = ref_change_lag(steps.tolist(), x.tolist(), y.tolist(), p.lag)
        assert p.n == n and p.r == pytest.approx(want, abs=1e-12)
        lo, hi = ref_fisher(want, n)
        assert p.ci_low == pytest.approx(lo, abs=1e-12) and p.ci_high == pytest.approx(
            hi, abs=1e-12
        )
    assert all(abs(p.r) < 0.5 for p in points)  # the trends are gone
    same_step = next(p for p in points if p.lag == 0)
    assert same_step.ci_low < 0 < same_step.ci_high


def test_three_points_give_no_lead_lag() -> None:
    """The report once gave "r = +1.00" from 3 points of two monotone curves."""
    steps = steps_of(3)
    points = change_lead_lag(steps, np.array([1.0, 2.0, 4.0]), np.array([0.1, 0.5, 0.7]))
    assert all(p.r is None and p.ci_low is None for p in points)
    assert max(p.n for p in points) == 2 and best_lag(points) is None


def test_lead_lag_needs_min_pairs_of_changes() -> None:
    x_all, y_all = signal(steps_of(40)), signal(steps_of(40) - 1)  # y(s) = x(s - 1)
    for n_steps in (MIN_LAG_PAIRS, MIN_LAG_PAIRS + 1):
        steps = steps_of(n_steps)
        at = {p.lag: p for p in change_lead_lag(steps, x_all[:n_steps], y_all[:n_steps])}
        # lag 0 has n_steps - 1 pairs of changes, lag 1 one fewer
        assert at[0].n == n_steps - 1 and at[1].n == n_steps - 2
        assert (at[0].r is None) == (n_steps - 1 < MIN_LAG_PAIRS)
    long = {p.lag: p for p in change_lead_lag(steps_of(40), x_all, y_all)}
    assert long[1].r == pytest.approx(1.0, abs=1e-12) and long[1].n == 38
    assert (long[1].ci_low, long[1].ci_high) == (long[1].r, long[1].r)  # |r| = 1


def test_changes_are_taken_by_step() -> None:
    steps = np.array([0, 1, 2, 4, 5, 7], dtype=np.int64)
    values = np.array([1.0, 3.0, 6.0, 10.0, 15.0, 21.0])
    changed, delta = first_differences(steps, values)
    assert changed.tolist() == [1, 2, 5] and delta.tolist() == [
        2.0,
        3.0,
        5.0,
    ]  # no change over a gap
    assert ref_changes(steps.tolist(), values.tolist()) == {1: 2.0, 2: 3.0, 5: 5.0}
    empty = first_differences(steps_of(1), np.array([1.0]))
    assert len(empty[0]) == 0 and len(empty[1]) == 0


def test_fisher_interval() -> None:
    assert fisher_interval(None, 20) == (None, None)
    assert fisher_interval(0.5, 3) == (None, None)
    assert fisher_interval(-1.0, 12) == (-1.0, -1.0)
    lo, hi = fisher_interval(0.0, 10)
    assert (lo, hi) == pytest.approx(ref_fisher(0.0, 10), abs=1e-15)
    assert hi == pytest.approx(0.6296, abs=1e-4)  # why MIN_LAG_PAIRS = 10: r = 0 is -0.63..+0.63
    assert fisher_interval(0.8, 25) == pytest.approx(ref_fisher(0.8, 25), abs=1e-15)


# --- spikes ------------------------------------------------------------------------------------


def flat_noise(n: int) -> np.ndarray:
    """Deterministic noise cycling through -0.1, -0.05, 0, 0.05, 0.1 (in a shuffled order)."""
    return 0.05 * (((np.arange(n) * 3) % 5) - 2)


def test_usable_points_are_finite_and_positive_on_the_log_scale() -> None:
    steps = np.arange(6)
    values = np.array([0.5, np.nan, -1.0, 0.0, np.inf, 2.0])
    s, v = usable(steps, values, log=True)
    assert s.tolist() == [0, 5] and v.tolist() == [0.5, 2.0]
    s, v = usable(steps, values, log=False)
    assert s.tolist() == [0, 2, 3, 5] and v.tolist() == [0.5, -1.0, 0.0, 2.0]


def test_spikes_linear_planted() -> None:
    steps = steps_of(60, start=100)
    values = 1.0 + flat_noise(60)
    planted = [112, 130, 131, 150]
    values[np.isin(steps, planted)] += 2.0
    values[np.isin(steps, [103])] += 2.0  # too early: fewer than 5 previous points
    assert spikes(steps, values, log=False) == planted
    # a dip is not a spike
    values[np.isin(steps, [140])] -= 2.0
    assert spikes(steps, values, log=False) == planted


def test_spikes_log_mode() -> None:
    steps = steps_of(50)
    kl = 1e-3 * 10 ** flat_noise(50)  # +-0.1 decade of noise
    kl[[20, 35]] *= 30.0
    kl[[10, 11]] = [0.0, -1.0]  # skipped with log=True
    kl[25] = np.nan
    assert spikes(steps, kl) == [20, 35]
    # on the linear scale, the 30x values are spikes too; with z huge nothing is
    assert spikes(steps, kl, log=False) == [20, 35]
    assert spikes(steps, kl, z=1e6) == []


def test_spikes_constant_window_and_missing_steps() -> None:
    # constant window: any value above the median is a spike (z = +inf); equal values are not
    steps = np.array([0, 1, 2, 3, 5, 8, 9, 10], dtype=np.int64)
    values = np.array([2.0, 2, 2, 2, 2, 2, 2.001, 2])
    assert spikes(steps, values, log=False) == [9]
    assert spikes(steps[:5], values[:5], log=False) == []


def test_coincident_spikes_tolerance() -> None:
    steps = steps_of(60)
    kl = 1e-3 * 10 ** flat_noise(60)
    grad = 5.0 + 10 * flat_noise(60)
    kl[[15, 30, 45]] *= 50.0
    grad[[16, 33, 44, 46]] += 100.0  # 16: one after; 33: three after; 44 and 46 around 45
    got = coincident_spikes(steps, kl, grad)
    assert got == [Coincidence(15, 16), Coincidence(45, 44)]  # tie at 45: the earlier b spike
    assert got[0].offset == 1 and got[1].offset == -1
    wide = coincident_spikes(steps, kl, grad, tolerance=3)
    assert wide == [Coincidence(15, 16), Coincidence(30, 33), Coincidence(45, 44)]
    assert coincident_spikes(steps, kl, grad, tolerance=0) == []


# --- reward drops and the kl rise before them --------------------------------------------------


def collapse_case(kl_factor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    steps = steps_of(80)
    kl = 1e-3 * 10 ** flat_noise(80)
    kl[steps >= 40] *= kl_factor  # vllm_kl up 5x from step 40 on
    reward = 0.8 + 0.2 * flat_noise(80)  # +-0.02
    reward[steps >= 45] -= 0.5  # reward collapses at step 45
    return steps, kl, reward


def test_reward_drop_reported_once() -> None:
    steps, _, reward = collapse_case(1.0)
    drops = reward_drops(steps, reward)
    assert [d.step for d in drops] == [45]
    assert drops[0].after == pytest.approx(reward[45])
    assert drops[0].before == pytest.approx(float(np.median(reward[35:45])))
    assert drops[0].z < -3.5


def test_rise_before_drop() -> None:
    steps, kl, reward = collapse_case(5.0)
    (p,) = rise_before_drop(steps, kl, reward)
    assert (p.drop_step, p.kl_rise_step, p.lead) == (45, 40, 5)
    assert p.reward_after == pytest.approx(reward[45])
    assert p.reward_before == pytest.approx(float(np.median(reward[35:45])))
    assert p.kl_baseline == pytest.approx(float(np.median(kl[25:35])))
    assert p.kl_peak == pytest.approx(float(kl[35:45].max()))
    assert p.kl_factor == pytest.approx(p.kl_peak / p.kl_baseline)
    assert 5.0 <= p.kl_factor < 5.0 * 10**0.2
    # a 4-step look-back (41..44): the baseline (steps < 41, median of 31..40) is still low
    (short,) = rise_before_drop(steps, kl, reward, horizon=4)
    assert (short.drop_step, short.kl_rise_step) == (45, 41)


def test_long_high_kl_is_not_a_rise() -> None:
    steps, _, reward = collapse_case(1.0)
    kl = 1e-3 * 10 ** flat_noise(80)
    kl[steps >= 20] *= 5.0  # high since step 20: the baseline (steps 25..34) is high too
    assert rise_before_drop(steps, kl, reward) == []


def test_rise_before_drop_step_based_with_gaps() -> None:
    steps, kl, reward = collapse_case(5.0)
    keep = ~np.isin(steps, [38, 39, 42])  # missing steps shift nothing
    kl_nan = kl.copy()
    kl_nan[41] = np.nan
    (p,) = rise_before_drop(steps[keep], kl_nan[keep], reward[keep])
    assert (p.drop_step, p.kl_rise_step) == (45, 40)


def test_no_precedence_with_flat_kl() -> None:
    steps, kl, reward = collapse_case(1.0)
    assert [d.step for d in reward_drops(steps, reward)] == [45]
    assert rise_before_drop(steps, kl, reward) == []
    # a kl rise with no reward drop: nothing either
    steps, kl, _ = collapse_case(5.0)
    assert rise_before_drop(steps, kl, 0.8 + 0.2 * flat_noise(80)) == []


def test_rise_not_assessed_without_history() -> None:
    steps, kl, reward = collapse_case(5.0)
    kl[:33] = np.nan  # only steps 33, 34 before the look-back window: fewer than 5
    assert rise_before_drop(steps, kl, reward) == []


# --- properties --------------------------------------------------------------------------------

ints = st.lists(st.integers(-1000, 1000), min_size=3, max_size=40)


def paired(data: st.DataObject) -> tuple[np.ndarray, np.ndarray]:
    x = data.draw(ints)
    y = data.draw(st.lists(st.integers(-1000, 1000), min_size=len(x), max_size=len(x)))
    return np.array(x, dtype=np.float64), np.array(y, dtype=np.float64)


@settings(max_examples=examples(60), deadline=None)
@given(st.data(), st.floats(0.01, 100.0), st.floats(-100.0, 100.0))
def test_pearson_properties(data: st.DataObject, scale: float, shift: float) -> None:
    x, y = paired(data)
    r = pearson(x, y)
    assert r == pearson(y, x)
    if r is None:
        return
    assert -1.0 <= r <= 1.0
    assert pearson(scale * x + shift, y) == pytest.approx(r, abs=1e-9)
    assert pearson(x, -scale * y + shift) == pytest.approx(-r, abs=1e-9)


@settings(max_examples=examples(60), deadline=None)
@given(st.data())
def test_spearman_monotone_invariance(data: st.DataObject) -> None:
    x, y = paired(data)
    r = spearman(x, y)
    assert r == spearman(y, x)
    if r is None:
        return
    assert -1.0 <= r <= 1.0
    assert spearman(x**3 + 5 * x, np.exp(y / 100.0)) == pytest.approx(r, abs=1e-12)
    assert spearman(-x, y) == pytest.approx(-r, abs=1e-12)
