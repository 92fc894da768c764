"""stats/step_ids: the per-step id sums against a direct loop, merged parts equal to one pass,
ids past ``BUCKETS`` sharing a bucket, and ``shift_beyond`` against a per-id reference: a shift
the steps alone carry is found, one every step shares is not."""

from __future__ import annotations

import numpy as np
import pytest

from mismatchctl.stats.step_ids import (
    BUCKETS,
    StepIdState,
    drift,
    drift_within,
    shift_beyond,
    step_id_state,
)


def _tokens(
    seed: int, steps: int = 6, seqs: int = 60, length: int = 40, vocab: int = 50
) -> tuple[np.ndarray, ...]:
    """Sequences of ``length`` tokens, ``seqs`` a step, in step order; ids from a skewed draw
    (some ids many times, as text has)."""
    rng = np.random.default_rng(seed)
    step = np.repeat(np.arange(1, steps + 1), seqs * length)
    ids = np.minimum(rng.geometric(0.08, len(step)) - 1, vocab - 1).astype(np.int64)
    r = rng.normal(0.0, 0.02, len(step))
    starts = np.arange(0, len(step), length)
    return ids, r, step, starts


def _reference(ids: np.ndarray, r: np.ndarray, step: np.ndarray, inside: set[int]) -> float:
    """The share, id by id, from the tokens themselves."""
    hot = np.isin(step, list(inside))
    m_in, m_out = r[hot].mean(), r[~hot].mean()
    spread = ((r[hot] - m_in) ** 2).sum()
    total = 0.0
    for i in np.unique(ids):
        a, b = r[hot & (ids == i)], r[~hot & (ids == i)]
        if len(a) < 30 or len(b) < 30:
            continue
        d = (a.mean() - m_in) - (b.mean() - m_out)
        total += len(a) * d * d - a.var(ddof=1) - len(a) * b.var(ddof=1) / len(b)
    return max(total, 0.0) / spread


def test_sums_against_a_loop_and_tokens_without_an_id_left_out() -> None:
    ids, r, step, starts = _tokens(1)
    ids[::17] = -1
    st = step_id_state(ids, r, step, starts)
    assert sorted(st.steps) == [1, 2, 3, 4, 5, 6]
    for s, sums in st.steps.items():
        for i in (0, 3, 49):
            sel = (step == s) & (ids == i)
            assert sums[0, i] == sel.sum()
            assert sums[1, i] == pytest.approx(r[sel].sum(), abs=1e-12)
            assert sums[2, i] == pytest.approx((r[sel] ** 2).sum(), abs=1e-12)
    assert sum(a[0].sum() for a in st.steps.values()) == (ids >= 0).sum()


def test_parts_merged_equal_one_pass() -> None:
    ids, r, step, starts = _tokens(2)
    whole = step_id_state(ids, r, step, starts)
    cut = int(starts[len(starts) // 2 + 3])  # within step 4: a step over two parts
    first = step_id_state(ids[:cut], r[:cut], step[:cut], starts[starts < cut])
    rest = step_id_state(ids[cut:], r[cut:], step[cut:], starts[starts >= cut] - cut)
    merged = StepIdState().merge(first).merge(rest)
    assert merged.steps.keys() == whole.steps.keys()
    for s in whole.steps:
        np.testing.assert_allclose(merged.steps[s], whole.steps[s], rtol=1e-12, atol=1e-15)
    assert step_id_state(ids[:0], r[:0], step[:0], starts[:0]).steps == {}


def test_ids_beyond_the_buckets_share_one() -> None:
    ids = np.array([5, 5 + BUCKETS, 7], np.int64)
    st = step_id_state(ids, np.array([0.1, 0.2, 0.3]), np.ones(3, np.int64), np.array([0]))
    assert st.steps[1][0, 5] == 2 and st.steps[1][1, 5] == pytest.approx(0.3)


def test_a_shift_at_some_steps_alone_is_found_one_at_every_step_is_not() -> None:
    """Ids 0-4 shifted by 0.03 at steps 5 and 6 alone: the share beyond the other steps is
    their own share there and matches the per-id reference; the same shift at every step (a
    template, a processor) leaves nothing beyond, the two sides' shifts correlated."""
    ids, r, step, starts = _tokens(3)
    moved = ids < 5
    at_steps = r + np.where(moved & (step >= 5), 0.03 * (ids + 1) / 5, 0.0)
    st = step_id_state(ids, at_steps, step, starts)
    found = shift_beyond(st, {5, 6})
    assert found is not None and found.beyond > 0.1 and found.outside < 0.02
    assert found.beyond == pytest.approx(_reference(ids, at_steps, step, {5, 6}), rel=1e-9)

    everywhere = r + np.where(moved, 0.03 * (ids + 1) / 5, 0.0)
    st = step_id_state(ids, everywhere, step, starts)
    same = shift_beyond(st, {5, 6})
    assert same is not None and same.inside > 0.1 and same.outside > 0.1
    assert same.beyond < 0.01 and same.correlation > 0.9
    assert same.beyond == pytest.approx(_reference(ids, everywhere, step, {5, 6}), abs=1e-12)


def test_nothing_to_compare() -> None:
    ids, r, step, starts = _tokens(4)
    st = step_id_state(ids, r, step, starts)
    assert shift_beyond(st, {1, 2, 3, 4, 5, 6}) is None  # no other step
    assert shift_beyond(StepIdState(), {1}) is None
    flat = step_id_state(ids, np.zeros_like(r), step, starts)
    assert shift_beyond(flat, {5}) is None  # r does not vary


def test_drift_compares_the_first_half_of_the_steps_with_the_second() -> None:
    """A shift the same at every step (a fixed function) does not drift; one whose ids change
    half way (each step's update another) drifts by its own share; one step: nothing to
    compare."""
    ids, r, step, starts = _tokens(5)
    fixed = r + np.where(ids < 5, 0.03 * (ids + 1) / 5, 0.0)
    still = drift(step_id_state(ids, fixed, step, starts))
    assert still is not None and still.beyond < 0.01 and still.correlation > 0.9
    assert still.beyond == pytest.approx(_reference(ids, fixed, step, {1, 2, 3}), abs=1e-12)

    moving = (
        r
        + np.where((ids < 5) & (step <= 3), 0.03, 0.0)
        - np.where((ids >= 5) & (ids < 10) & (step > 3), 0.03, 0.0)
    )
    found = drift(step_id_state(ids, moving, step, starts))
    assert found is not None and found.beyond > 0.1 and found.correlation < 0.5
    assert found.beyond == pytest.approx(_reference(ids, moving, step, {1, 2, 3}), rel=1e-9)

    one = step == 1
    assert drift(step_id_state(ids[one], r[one], step[one], starts[starts < one.sum()])) is None


def test_drift_within_some_steps_leaves_the_others_out() -> None:
    """Among steps 3-6 alone: ids moved at steps 3-4 and others at 5-6 drift (the first half of
    those steps beyond the second, as the reference over those steps' tokens alone says); steps
    1-2, shifted alike at every id, are not read. Fewer than two steps: None."""
    ids, r, step, starts = _tokens(7)
    moving = (
        r
        + np.where((ids < 5) & np.isin(step, [3, 4]), 0.03, 0.0)
        - np.where((ids >= 5) & (ids < 10) & (step >= 5), 0.03, 0.0)
        + np.where((ids < 10) & (step <= 2), 0.05 * (ids + 1) / 10, 0.0)
    )
    state = step_id_state(ids, moving, step, starts)
    found = drift_within(state, {3, 4, 5, 6})
    later = step >= 3
    expected = _reference(ids[later], moving[later], step[later], {3, 4})
    assert found is not None and found.beyond == pytest.approx(expected, rel=1e-9)
    assert found.beyond > 0.1
    assert drift_within(state, {3, 4, 5, 6}) != drift(state)
    assert drift_within(state, {4}) is None and drift_within(state, {9, 10}) is None
