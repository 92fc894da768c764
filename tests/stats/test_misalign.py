"""Turns shifted by one position on their own (``stats/misalign.py``): the state against a
plain per-turn reference, merged chunks equal to one chunk, and what is and is not a shift."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mismatchctl.stats import per_token
from mismatchctl.stats.comoments import shifted_pairs
from mismatchctl.stats.misalign import (
    FACTOR,
    MAX_MATCH,
    MIN_K3,
    MIN_PAIRS,
    MisalignState,
    clamped_k3,
    misalign_state,
)


def _k3(r: float) -> float:
    c = min(max(r, -20.0), 20.0)
    return math.expm1(c) - c


def _reference(lr, lt, seq, turn, ids=None) -> tuple[int, int, int, int]:
    """(tested, misaligned, their tokens, later) by a loop over the turns, over the adjacent
    pairs of two different tokens (all of them without ``ids``)."""
    runs: dict[tuple[int, int], list[int]] = {}
    for i, key in enumerate(zip(seq.tolist(), turn.tolist(), strict=True)):
        runs.setdefault(key, []).append(i)
    tested = bad = tokens = later = 0
    for idx in runs.values():
        n = len(idx)
        a, t = [lr[i] for i in idx], [lt[i] for i in idx]
        pairs = [j for j in range(n - 1) if ids is None or ids[idx[j]] != ids[idx[j + 1]]]
        m = len(pairs)
        if m < MIN_PAIRS:
            continue
        tested += 1
        base_p = sum(_k3(t[j] - a[j]) for j in pairs) / m
        plus = sum(_k3(t[j + 1] - a[j]) for j in pairs) / m
        base_m = sum(_k3(t[j + 1] - a[j + 1]) for j in pairs) / m
        minus = sum(_k3(t[j] - a[j + 1]) for j in pairs) / m
        is_later = base_p >= MIN_K3 and plus * FACTOR <= base_p and plus <= MAX_MATCH
        is_earlier = base_m >= MIN_K3 and minus * FACTOR <= base_m and minus <= MAX_MATCH
        if is_later or is_earlier:
            bad += 1
            tokens += n
            later += is_later
    return tested, bad, tokens, later


def _data(seed: int, shifted: float) -> tuple[np.ndarray, ...]:
    """Turns of 3-30 tokens; a share ``shifted`` of them has the trainer side one position
    later (its first value a 0.0 fill), some one earlier."""
    rng = np.random.default_rng(seed)
    lr_all, lt_all, seq_all, turn_all = [], [], [], []
    for s in range(200):
        for t in range(int(rng.integers(1, 4))):
            n = int(rng.integers(3, 31))
            lr = -rng.exponential(1.0, n) * rng.choice([0.01, 1.0], n, p=[0.4, 0.6])
            lt = lr * np.exp(0.05 * rng.standard_normal(n))
            u = rng.random()
            if u < shifted / 2:
                lt = np.r_[0.0, lt[:-1]]
            elif u < shifted:
                lt = np.r_[lt[1:], 0.0]
            lr_all.append(lr)
            lt_all.append(lt)
            seq_all.append(np.full(n, s))
            turn_all.append(np.full(n, t))
    return tuple(np.concatenate(x) for x in (lr_all, lt_all, seq_all, turn_all))


@pytest.mark.parametrize("shifted", [0.0, 0.05, 0.5])
def test_misaligned_turns_agree_with_a_loop_over_the_turns(shifted: float) -> None:
    lr, lt, seq, turn = _data(3, shifted)
    state = misalign_state(lr, lt, seq, turn, np.zeros_like(seq), "run")
    tested, bad, tokens, later = _reference(lr, lt, seq, turn)
    assert (state.turns, state.misaligned, state.tokens, state.later) == (
        tested,
        bad,
        tokens,
        later,
    )
    assert state.earlier == bad - later
    if shifted:
        assert bad > 0 and later > 0 and state.earlier > 0
    else:
        assert bad == 0


@pytest.mark.parametrize("shifted", [0.0, 0.5])
def test_pairs_of_one_token_repeated_are_left_out_as_the_loop_leaves_them(shifted: float) -> None:
    """With token ids, the pairs of the same token twice tell no shift: the state is the
    loop's over the pairs of two different tokens."""
    lr, lt, seq, turn = _data(9, shifted)
    ids = np.random.default_rng(9).integers(0, 3, len(lr))  # many neighbours repeat
    state = misalign_state(lr, lt, seq, turn, np.zeros_like(seq), "run", ids=ids)
    tested, bad, tokens, later = _reference(lr, lt, seq, turn, ids)
    assert (state.turns, state.misaligned, state.tokens, state.later) == (
        tested,
        bad,
        tokens,
        later,
    )
    assert tested < _reference(lr, lt, seq, turn)[0]  # fewer turns keep MIN_PAIRS pairs


def test_a_hot_turn_of_one_repeated_token_is_no_shift() -> None:
    """A turn of one token repeated (``###...``, as a template fault's later turn in the
    calibration corpus) whose logprob climbs along the run, with the trainer's climb one token
    behind (its context one ``#`` short), matches one position off: without ids, or with ids
    of different tokens, it is a shift; with the one id repeated it is not tested."""
    n = 32
    lr = -16.0 + 0.5 * np.arange(n)  # each # likelier than the one before
    lt = np.r_[lr[0] - 0.5, lr[:-1]]  # lag 0 a K3 of 0.11 a token, one position off 0
    seq = np.zeros(n, np.int64)
    assert misalign_state(lr, lt, seq, seq, seq).misaligned == 1
    assert misalign_state(lr, lt, seq, seq, seq, ids=np.arange(n)).misaligned == 1
    state = misalign_state(lr, lt, seq, seq, seq, ids=np.full(n, 35))
    assert (state.turns, state.misaligned) == (0, 0)
    few = np.where(np.arange(n) < n - MIN_PAIRS, 35, np.arange(n))  # MIN_PAIRS pairs differ
    assert misalign_state(lr, lt, seq, seq, seq, ids=few).turns == 1


@pytest.mark.parametrize(("off", "shifted"), [(0.02, True), (0.4, True), (2.0, False)])
def test_a_shifted_pairing_must_match_not_only_be_less_wrong(off: float, shifted: bool) -> None:
    """A turn whose every pairing is far off (the trainer's values unrelated to the rollout's,
    as wrong routes replayed make them) can pair ten times less badly one position off by
    chance: that is no writer's shift unless the shifted pairing matches (``MAX_MATCH``). A
    trainer side one position later, off by ``off`` nats a token from the rollout's: a shift up
    to a large numeric mismatch, none beyond."""
    n = 16
    rng = np.random.default_rng(5)
    lr = -rng.uniform(0.5, 6.0, n)
    lt = np.r_[-20.0, lr[:-1] + off * np.where(np.arange(n - 1) % 2 == 0, 1.0, -1.0)]
    seq = np.zeros(n, np.int64)
    found = misalign_state(lr, lt, seq, seq, seq)
    assert found.turns == 1 and (found.misaligned == 1) is shifted
    assert _reference(lr, lt, seq, seq)[1] == found.misaligned


def test_chunks_merge_to_the_whole() -> None:
    lr, lt, seq, turn = _data(4, 0.2)
    step = seq // 50
    whole = misalign_state(lr, lt, seq, turn, step, "run")
    cut = int(np.flatnonzero(seq == 100)[0])  # chunks of whole sequences
    a = misalign_state(lr[:cut], lt[:cut], seq[:cut], turn[:cut], step[:cut], "run")
    b = misalign_state(lr[cut:], lt[cut:], seq[cut:], turn[cut:], step[cut:], "run")
    merged = a.merge(b)
    assert (merged.turns, merged.misaligned, merged.tokens, merged.later, merged.earlier) == (
        whole.turns,
        whole.misaligned,
        whole.tokens,
        whole.later,
        whole.earlier,
    )
    assert merged.examples == sorted(whole.examples)[: len(merged.examples)]
    assert MisalignState().merge(whole).misaligned == whole.misaligned


def test_a_fill_on_one_side_or_one_monster_token_is_no_shift() -> None:
    rng = np.random.default_rng(5)
    n = 12
    lr = -rng.exponential(1.0, n)
    lr[0] = -9.0  # one very unlikely first token: a large K3 at lag 0 only if left in one side
    seq, turn = np.zeros(n, np.int64), np.zeros(n, np.int64)
    zeros = np.zeros(n)  # the trainer side all 0.0: every lag costs the same
    assert misalign_state(lr, zeros, seq, turn, seq).misaligned == 0
    sentinel = lr.copy()
    sentinel[5] = -9999.0
    assert misalign_state(lr, sentinel, seq, turn, seq).misaligned == 0
    assert misalign_state(lr, np.r_[0.0, lr[:-1]], seq, turn, seq).misaligned == 1


def test_short_turns_and_near_certain_tokens_are_not_tested() -> None:
    seq = np.zeros(MIN_PAIRS, np.int64)
    lr = np.linspace(-3.0, -0.1, MIN_PAIRS)
    state = misalign_state(lr, np.r_[0.0, lr[:-1]], seq, seq, seq)
    assert state.turns == 0 and state.misaligned == 0  # MIN_PAIRS - 1 pairs
    lr = np.full(20, -1e-4)  # near-certain: every lag is close
    lt = np.r_[0.0, lr[:-1]] * 1.01
    seq = np.zeros(20, np.int64)
    assert misalign_state(lr, lt, seq, seq, seq).misaligned == 0


def test_clamped_k3_from_the_unclamped_one_is_the_clamped_k3_bit_for_bit() -> None:
    """Within the clamp the unclamped K3 is taken as it is; beyond it (sentinels, overflow,
    inf) made again from the clamped ``r``; a NaN stays NaN."""
    rng = np.random.default_rng(6)
    r = rng.normal(0.0, 0.3, 1000)
    r[[3, 50, 400]] = [25.0, -9998.5, np.inf]
    r[9] = np.nan
    with np.errstate(over="ignore", invalid="ignore"):
        k3 = per_token.k3(r)
        want = per_token.k3(np.clip(r, -20.0, 20.0))
    got = clamped_k3(r, k3)
    np.testing.assert_array_equal(got, want)
    assert got[3] < k3[3] and np.isnan(k3[400]) and np.isfinite(got[400])  # clamped
    inside = k3[10:40]  # no |r| beyond the clamp: the vector as it is, not a copy
    assert clamped_k3(r[10:40], inside) is inside


@pytest.mark.parametrize("seed", [7, 8])
def test_the_shared_pairs_and_log_ratio_give_the_same_turns(seed: int) -> None:
    """The engine hands in the slice's r, K3 and shifted pairs (unclamped, shared with the
    lag sums): the same state as the test's own clamped vectors, sentinels among the tokens."""
    lr, lt, seq, turn = _data(seed, 0.2)
    lt[np.random.default_rng(seed).choice(len(lt), 20, replace=False)] = -9999.0
    step = seq // 50
    own = misalign_state(lr, lt, seq, turn, step, "run")
    r = lt - lr
    with np.errstate(over="ignore"):
        k3 = per_token.k3(r)
    given = misalign_state(
        lr, lt, seq, turn, step, "run", k3=k3, r=r, shifted=shifted_pairs(lr, lt, seq, turn)
    )
    assert given == own
    assert own.misaligned > 0
