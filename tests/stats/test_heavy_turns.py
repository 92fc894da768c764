"""stats/heavy_turns against a plain computation from the tokens: the later turns' K3 per token
over the first turns', with the heaviest sequences (by their K3 over both turn kinds) left out;
several runs' states pooled equal one state of their sequences; a contrast carried by a few heavy
responses falls once they are left out, one of every response does not."""

from __future__ import annotations

import numpy as np
import pytest

from mismatchctl.stats import assign_bins, parse_bins
from mismatchctl.stats.heavy_turns import later_over_first
from mismatchctl.stats.hot_sequences import hot_sequence_state

EDGES = parse_bins("log")
N_BINS = len(EDGES) - 1
REL = 1e-9


def _tokens(seed: int, heavy: int = 0, later: float = 1.0) -> tuple:
    """Sequences of 10-60 tokens, their second half a later turn; the later turns' noise times
    ``later``; the first ``heavy`` sequences' later turns 30 times the noise."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(10, 60, 150)
    seq = np.repeat(np.arange(len(lengths)) * 3 + 2, lengths)
    turn = np.concatenate([(np.arange(n) >= n // 2).astype(np.int32) for n in lengths])
    lr = -rng.exponential(rng.choice([0.02, 0.5, 3.0], len(seq)))
    heavy_seq = seq < 3 * heavy + 2  # the first ``heavy`` sequences' ids
    scale = np.where(turn > 0, later * np.where(heavy_seq, 30.0, 1.0), 1.0)
    r = 0.05 * scale * lr * rng.standard_normal(len(seq))
    return lr, lr + r, seq, turn


def _state(tokens: tuple, label: str = "a"):
    lr, lt, seq, turn = tokens
    bins = assign_bins(np.exp(lr), EDGES)
    step = np.zeros(len(seq), np.int64)
    return hot_sequence_state(lr, lt, seq, turn, step, bins, N_BINS, label).runs()[label]


def _reference(tokens: tuple, leave_out: int) -> tuple[float, float]:
    lr, lt, seq, turn = tokens
    r = lt - lr
    k3 = np.expm1(r) - r
    ids = np.unique(seq)
    per = {s: (k3[(seq == s) & (turn == 0)].sum(), k3[(seq == s) & (turn > 0)].sum()) for s in ids}
    heavy = sorted(ids, key=lambda s: -(per[s][0] + per[s][1]))[:leave_out]
    keep = ~np.isin(seq, heavy)
    first, later = keep & (turn == 0), keep & (turn > 0)
    ratio = (k3[later].sum() / later.sum()) / (k3[first].sum() / first.sum())
    share = sum(per[s][1] for s in heavy) / k3[turn > 0].sum()
    return float(ratio), float(share)


@pytest.mark.parametrize("leave_out", [0, 1, 3, 10])
def test_the_ratio_equals_the_tokens(leave_out: int) -> None:
    tokens = _tokens(1, heavy=3)
    found = later_over_first([_state(tokens)], N_BINS, leave_out)
    ratio, share = _reference(tokens, leave_out)
    assert found.left_out == leave_out
    assert found.ratio == pytest.approx(ratio, rel=REL)
    assert found.later_share == pytest.approx(share, rel=REL, abs=1e-12)


def test_runs_pooled_are_their_sequences_together() -> None:
    a, b = _tokens(2, heavy=2), _tokens(3)
    moved = (b[0], b[1], b[2] + 10_000, b[3])  # b's sequence ids after a's
    both = tuple(np.concatenate([x, y]) for x, y in zip(a, moved, strict=True))
    pooled = later_over_first([_state(a, "a"), _state(b, "b")], N_BINS, 4)
    one = later_over_first([_state(both)], N_BINS, 4)
    assert pooled.ratio == pytest.approx(one.ratio, rel=REL)
    assert pooled.later_share == pytest.approx(one.later_share, rel=REL)


def test_a_few_heavy_responses_carry_the_contrast_and_many_do_not() -> None:
    few = _tokens(4, heavy=3)
    assert later_over_first([_state(few)], N_BINS, 0).ratio > 5
    assert later_over_first([_state(few)], N_BINS, 3).ratio < 1.5
    many = _tokens(4, later=3.0)
    assert later_over_first([_state(many)], N_BINS, 3).ratio > 5
