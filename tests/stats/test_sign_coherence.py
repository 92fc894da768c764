"""stats/sign_coherence against a loop over the sequences: each sequence's count of r > 0
against its cells' rates (turn kind x probability bin), the dispersion of the z and its
chi-square tail (against the closed form for an even number of degrees of freedom)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mismatchctl.stats import assign_bins, parse_bins
from mismatchctl.stats.hot_sequences import MIN_TOKENS, canonical, hot_sequence_state
from mismatchctl.stats.sign_coherence import in_cells, off_gpus, sign_coherence, tail_coherence

EDGES = parse_bins("log")


def _responses(rng: np.random.Generator, shortest: int, longest: int, n_seq: int, lean: float):
    """Responses of ``shortest`` to ``longest`` tokens in two turns: their lengths, each token's
    sequence and turn, its response's lean ``u ~ N(0, lean^2)``, and logprobs of three scales."""
    lengths = rng.integers(shortest, longest, n_seq)
    seq = np.repeat(np.arange(n_seq), lengths)
    turn = np.concatenate([(np.arange(n) >= n // 2).astype(np.int32) for n in lengths])
    u = np.repeat(rng.normal(0.0, lean, n_seq), lengths)
    lr = -rng.exponential(rng.choice([0.05, 1.0, 4.0], len(seq)))
    return lengths, seq, turn, u, lr


def _tokens(seed: int, lean: float, n_seq: int = 400) -> tuple:
    """Sequences of 5-60 tokens, two turns; r = 0.05 |lr| (eps + u) with one u ~ N(0, lean^2)
    per sequence, and a few tokens with r = 0 exactly."""
    rng = np.random.default_rng(seed)
    _, seq, turn, u, lr = _responses(rng, 5, 60, n_seq, lean)
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


def _reference(lr, lt, seq, turn) -> tuple[int, float, float, float]:
    r = lt - lr
    cell = (turn > 0) * 100 + assign_bins(np.exp(lr), EDGES)
    moved = r != 0
    p = {c: (r[moved & (cell == c)] > 0).mean() for c in np.unique(cell[moved])}
    zs, lengths = [], []
    for s in np.unique(seq):
        m = (seq == s) & moved
        if m.sum() < MIN_TOKENS:
            continue
        e = np.array([p[c] for c in cell[m]])
        var = float(np.sum(e * (1 - e)))
        if var > 0:
            zs.append((float((r[m] > 0).sum()) - float(e.sum())) / math.sqrt(var))
            lengths.append(int(m.sum()))
    z = np.array(zs)
    return len(z), float(np.mean(z * z)), float(np.sum(z * z)), float(np.mean(lengths))


@pytest.mark.parametrize("lean", [0.0, 0.3])
def test_dispersion_is_the_loops(lean: float) -> None:
    lr, lt, seq, turn, step = _tokens(1, lean)
    bins = assign_bins(np.exp(lr), EDGES)
    state = hot_sequence_state(lr, lt, seq, turn, step, bins, len(EDGES) - 1, "a").joined()
    found = sign_coherence(state)
    k, d, q, mean_tokens = _reference(lr, lt, seq, turn)
    assert found.tested == k
    assert found.dispersion == pytest.approx(d, rel=1e-9)
    assert found.mean_tokens == pytest.approx(mean_tokens, rel=1e-12)
    assert k % 2 == 0  # these seeds: the closed form below applies
    assert found.p_value == pytest.approx(_chi2_sf_even(q, k), rel=1e-6, abs=1e-300)
    if lean:
        assert found.dispersion > 2 and found.p_value < 1e-10
    else:
        assert 0.8 < found.dispersion < 1.2 and found.p_value > 1e-3


def _on_gpus(lean_on_b: float) -> tuple:
    """400 sequences on gpus A and B (alternating); only B's lean (one u per sequence)."""
    lr, _, seq, turn, step = _tokens(3, 0.0)
    rng = np.random.default_rng(4)
    gpu = np.where(seq % 2 == 0, "A", "B").astype(object)
    u = np.where(seq % 2 == 1, rng.normal(0.0, lean_on_b, seq.max() + 1)[seq], 0.0)
    lt = lr + 0.05 * np.abs(lr) * (rng.standard_normal(len(seq)) + u)
    bins = assign_bins(np.exp(lr), EDGES)
    state = hot_sequence_state(lr, lt, seq, turn, step, bins, len(EDGES) - 1, "a", gpu)
    return state.joined(), lr, lt, seq, turn, gpu


def test_the_other_gpus_sequences_are_tested_alone() -> None:
    """One gpu's responses lean: the whole run spreads, the other gpu's sequences do not, and
    their test is the test of their tokens alone."""
    state, lr, lt, seq, turn, gpu = _on_gpus(0.6)
    assert list(canonical(state).gpu[:2]) == ["A", "B"]
    assert sign_coherence(state).dispersion > 2
    rest = off_gpus(state, {"B"})
    assert set(rest.gpu) == {"A"}
    keep = gpu == "A"
    bins = assign_bins(np.exp(lr[keep]), EDGES)
    alone = hot_sequence_state(
        lr[keep], lt[keep], seq[keep], turn[keep], np.zeros(int(keep.sum()), np.int64), bins,
        len(EDGES) - 1, "a",
    ).joined()  # fmt: skip
    assert sign_coherence(rest).dispersion == pytest.approx(sign_coherence(alone).dispersion)
    assert sign_coherence(rest).dispersion < 1.5
    assert len(off_gpus(state, {"A", "B"}).step) == 0


def test_the_first_turns_cells_are_tested_alone() -> None:
    """``in_cells`` keeps each sequence's first-turn tokens: the test of those tokens alone."""
    lr, lt, seq, turn, step = _tokens(5, 0.3)
    n_bins = len(EDGES) - 1
    state = hot_sequence_state(
        lr, lt, seq, turn, step, assign_bins(np.exp(lr), EDGES), n_bins, "a"
    ).joined()
    cells = np.zeros(2 * n_bins, bool)
    cells[:n_bins] = True
    first = turn == 0
    alone = hot_sequence_state(
        lr[first], lt[first], seq[first], turn[first], step[first],
        assign_bins(np.exp(lr[first]), EDGES), n_bins, "a",
    ).joined()  # fmt: skip
    found, ref = sign_coherence(in_cells(state, cells)), sign_coherence(alone)
    assert (found.tested, found.dispersion) == (ref.tested, pytest.approx(ref.dispersion))
    assert all(g is None for g in in_cells(state, cells).gpu)  # no gpu given: none known


def _truncated(seed: int, lean: float, n_seq: int = 400) -> tuple:
    """A truncation renormalised on the rollout side over healthy noise: r = 0.025 |lr| (eps +
    u), about 2% of the tokens above 0.05 |lr| as in the corpus' healthy runs, with one u ~
    N(0, lean^2) per response (another policy); each response's contexts are cut with a share
    of its own (the kept mass belongs to the context, which a response's tokens share), and a
    cut token's r falls by its kept mass' log, far below the noise."""
    rng = np.random.default_rng(seed)
    lengths, seq, turn, u, lr = _responses(rng, 16, 80, n_seq, lean)
    r = 0.025 * np.abs(lr) * (rng.standard_normal(len(seq)) + u)
    cut = rng.random(len(seq)) < np.repeat(rng.uniform(0.2, 0.9, n_seq), lengths)
    r = np.where(cut, r - 0.5 * np.abs(lr), r)
    return lr, lr + r, seq, turn, np.zeros(len(seq), np.int64)


def test_a_truncation_leans_the_signs_but_not_their_positive_tail() -> None:
    """Cut tokens fall below zero, so each response's count of r > 0 follows its cut share:
    the sign test leans (dispersion over 1.5) on a truncation alone. The tokens in the noise's
    positive tail (r above TAIL_RATIO |lr|), which no cut token reaches, are rare, so the cut
    share moves their counts by less than their binomial scatter: they lean as independent
    tokens do, and another policy's lean shows there."""
    found = {}
    for lean in (0.0, 1.0):
        lr, lt, seq, turn, step = _truncated(5, lean)
        bins = assign_bins(np.exp(lr), EDGES)
        state = hot_sequence_state(lr, lt, seq, turn, step, bins, len(EDGES) - 1).joined()
        found[lean] = (sign_coherence(canonical(state)), tail_coherence(canonical(state)))
    signs, tail = found[0.0]
    assert signs.dispersion > 1.5 and signs.p_value < 1e-6
    assert tail.tested > 350 and tail.dispersion < 1.3 and tail.p_value > 1e-6
    _, leaning = found[1.0]
    assert leaning.dispersion > 1.5 and leaning.p_value < 1e-6


def test_off_hot_keeps_the_sequences_that_are_not_hot() -> None:
    """A third of the sequences with r ten times larger and leaning: ``off_hot`` keeps the
    others (the hot ones are ``summarize``'s), and they do not lean; every sequence leaning,
    the others lean too."""
    from mismatchctl.stats.hot_sequences import summarize
    from mismatchctl.stats.sign_coherence import off_hot

    for some, lean_rest in ((True, False), (False, True)):
        rng = np.random.default_rng(3)
        _, seq, turn, u, lr = _responses(rng, 20, 60, 300, 0.3)
        hot = (seq % 3 == 0) if some else np.zeros(len(seq), bool)
        eps = rng.standard_normal(len(seq))
        r = 0.05 * np.abs(lr) * (eps + np.where(hot | lean_rest, u, 0.0)) * np.where(hot, 10, 1)
        bins = assign_bins(np.exp(lr), EDGES)
        state = hot_sequence_state(
            lr, lr + r, seq, turn, np.zeros(len(seq), np.int64), bins, len(EDGES) - 1, "a"
        ).joined()
        rest = off_hot(state)
        assert len(rest.step) == len(state.step) - summarize(state).hot
        if some:
            assert summarize(state).hot >= 50 and not set(rest.seq) & set(np.unique(seq[hot]))
        leans = sign_coherence(rest)
        assert (leans.dispersion > 2 and leans.p_value < 1e-10) == lean_rest, leans
