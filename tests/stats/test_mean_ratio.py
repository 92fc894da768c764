"""stats/mean_ratio against the tokens: ``1 - mean(exp r)`` over some sequences from their
per-sequence sums, its sequence-clustered standard error by a loop over the sequences, and the
two shapes it tells apart (noise keeps the mean ratio at 1, a truncation on the rollout side
lowers it by the mass it removes)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mismatchctl.stats import assign_bins, parse_bins
from mismatchctl.stats.hot_sequences import hot_sequence_state
from mismatchctl.stats.mean_ratio import mean_ratio
from mismatchctl.stats.sign_coherence import in_steps

EDGES = parse_bins("log")


def _tokens(seed: int, removed: float, n_seq: int = 300) -> tuple:
    """Responses of 5-80 tokens over 4 steps, two turns, logprobs of three scales; ``r`` is
    noise whose ratio has mean 1 on each token (``log`` of a lognormal of mean 1), plus
    ``log(1 - removed)`` on the steps 2 and 3 (mass removed there)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 80, n_seq)
    seq = np.repeat(np.arange(n_seq), lengths)
    step = np.repeat(rng.integers(0, 4, n_seq), lengths)
    turn = np.concatenate([(np.arange(n) >= n // 2).astype(np.int32) for n in lengths])
    lr = -rng.exponential(rng.choice([0.05, 1.0, 4.0], len(seq)))
    sigma = 0.05 * np.sqrt(np.abs(lr))
    r = sigma * rng.standard_normal(len(seq)) - sigma**2 / 2
    r = r + np.where(np.isin(step, [2, 3]), math.log1p(-removed), 0.0)
    return lr, lr + r, seq, turn, step


def _state(lr, lt, seq, turn, step):
    bins = assign_bins(np.exp(lr), EDGES)
    return hot_sequence_state(lr, lt, seq, turn, step, bins, len(EDGES) - 1, "a").joined()


def _reference(lr, lt, seq, keep) -> tuple[float, float, float]:
    r = (lt - lr)[keep]
    s = seq[keep]
    ok = np.isfinite(r)
    ratio = np.expm1(r[ok])
    m = ratio.mean()
    ids = np.unique(s[ok])
    resid = np.array([(ratio[s[ok] == i] - m).sum() for i in ids])
    se = math.sqrt((resid**2).sum() * len(ids) / (len(ids) - 1)) / ok.sum()
    k3 = (np.expm1(r[ok]) - r[ok]).mean()
    return -m, -m / se, k3


@pytest.mark.parametrize("removed", [0.0, 0.02])
def test_the_mean_ratio_of_some_steps_is_their_tokens(removed: float) -> None:
    lr, lt, seq, turn, step = _tokens(1, removed)
    state = _state(lr, lt, seq, turn, step)
    for steps in ({0, 1, 2, 3}, {2, 3}, {0}):
        found = mean_ratio(in_steps(state, steps))
        deficit, z, k3 = _reference(lr, lt, seq, np.isin(step, list(steps)))
        assert found is not None
        assert found.deficit == pytest.approx(deficit, rel=1e-9, abs=1e-15)
        assert found.z == pytest.approx(z, rel=1e-9, abs=1e-12)
        assert found.k3 == pytest.approx(k3, rel=1e-9)


def test_mass_removed_is_told_from_noise() -> None:
    """2% of the mass removed at steps 2 and 3: their deficit is about 0.02, many standard
    errors, and many times their K3; the other steps' noise keeps the mean ratio at 1."""
    state = _state(*_tokens(2, 0.02))
    hot, rest = mean_ratio(in_steps(state, {2, 3})), mean_ratio(in_steps(state, {0, 1}))
    assert hot is not None and rest is not None
    assert hot.deficit == pytest.approx(0.02, rel=0.15) and hot.z > 10 and hot.per_k3 > 4
    assert abs(rest.z) < 3 and abs(rest.per_k3) < 4


def test_fewer_than_two_sequences_give_none() -> None:
    lr, lt, seq, turn, step = _tokens(3, 0.0, n_seq=1)
    assert mean_ratio(_state(lr, lt, seq, turn, step)) is None
