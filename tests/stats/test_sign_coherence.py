"""stats/sign_coherence against a loop over the sequences: each sequence's count of r > 0
against its cells' rates (turn kind x probability bin), the dispersion of the z and its
chi-square tail (against the closed form for an even number of degrees of freedom)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mismatchctl.stats import assign_bins, parse_bins
from mismatchctl.stats.hot_sequences import MIN_TOKENS, hot_sequence_state
from mismatchctl.stats.sign_coherence import sign_coherence

EDGES = parse_bins("log")


def _tokens(seed: int, lean: float, n_seq: int = 400) -> tuple:
    """Sequences of 5-60 tokens, two turns; r = 0.05 |lr| (eps + u) with one u ~ N(0, lean^2)
    per sequence, and a few tokens with r = 0 exactly."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 60, n_seq)
    seq = np.repeat(np.arange(n_seq), lengths)
    turn = np.concatenate([(np.arange(n) >= n // 2).astype(np.int32) for n in lengths])
    u = np.repeat(rng.normal(0.0, lean, n_seq), lengths)
    lr = -rng.exponential(rng.choice([0.05, 1.0, 4.0], len(seq)))
    r = 0.05 * np.abs(lr) * (rng.standard_normal(len(seq)) + u)
    r[rng.random(len(seq)) < 0.02] = 0.0
    return lr, lr + r, seq, turn, np.zeros(len(seq), np.int64)


def _chi2_sf_even(q: float, k: int) -> float:
    """P(X > q) for X ~ chi-square with an even k: exp(-q/2) sum_{i < k/2} (q/2)^i / i!."""
    h, term, total = q / 2, 1.0, 1.0
    for i in range(1, k // 2):
        term *= h / i
        total += term
    return math.exp(-h + math.log(total))


def _reference(lr, lt, seq, turn) -> tuple[int, float, float]:
    r = lt - lr
    cell = (turn > 0) * 100 + assign_bins(np.exp(lr), EDGES)
    moved = r != 0
    p = {c: (r[moved & (cell == c)] > 0).mean() for c in np.unique(cell[moved])}
    zs = []
    for s in np.unique(seq):
        m = (seq == s) & moved
        if m.sum() < MIN_TOKENS:
            continue
        e = np.array([p[c] for c in cell[m]])
        var = float(np.sum(e * (1 - e)))
        if var > 0:
            zs.append((float((r[m] > 0).sum()) - float(e.sum())) / math.sqrt(var))
    z = np.array(zs)
    return len(z), float(np.mean(z * z)), float(np.sum(z * z))


@pytest.mark.parametrize("lean", [0.0, 0.3])
def test_dispersion_is_the_loops(lean: float) -> None:
    lr, lt, seq, turn, step = _tokens(1, lean)
    bins = assign_bins(np.exp(lr), EDGES)
    state = hot_sequence_state(lr, lt, seq, turn, step, bins, len(EDGES) - 1, "a").joined()
    found = sign_coherence(state)
    k, d, q = _reference(lr, lt, seq, turn)
    assert found.tested == k
    assert found.dispersion == pytest.approx(d, rel=1e-9)
    assert k % 2 == 0  # these seeds: the closed form below applies
    assert found.p_value == pytest.approx(_chi2_sf_even(q, k), rel=1e-6, abs=1e-300)
    if lean:
        assert found.dispersion > 2 and found.p_value < 1e-10
    else:
        assert 0.8 < found.dispersion < 1.2 and found.p_value > 1e-3
