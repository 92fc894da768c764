"""stats/signed_parts: the rows' sums against a direct computation, merged parts equal to one
pass, and the one-signed test on tokens sampled from a small vocabulary: noise between two
distributions keeps the part's mean ratio at 1 however loud, a mask on the sampling side lowers
it by the banned mass."""

from __future__ import annotations

import numpy as np

from mismatchctl.stats import per_token
from mismatchctl.stats.signed_parts import (
    FIELDS,
    SignedParts,
    one_signed,
    rate_ratio,
    signed_parts,
)

VOCAB = 40


def _cells(rng: np.random.Generator, seq: np.ndarray) -> np.ndarray:
    """Per token: turn, KV bin, turn-position bin, length bin (constant along a sequence in this
    fixture where it is per sequence) and probability bin."""
    n = len(seq)
    turn = np.minimum(np.arange(n) % 7 // 3, 3)
    per_seq = rng.integers(0, 4, seq.max() + 1)
    return np.column_stack([
        turn, np.arange(n) % 5 // 2, np.arange(n) % 3, per_seq[seq], rng.integers(0, 4, n)
    ])  # fmt: skip


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


def test_rows_hold_each_sequence_cells_sums() -> None:
    rng = np.random.default_rng(1)
    seq = np.sort(rng.integers(0, 30, 900))
    step = seq // 10
    cells = _cells(rng, seq)
    r = rng.normal(0, 0.05, len(seq))
    r[::50] = np.nan  # a token without a finite r is left out
    k3 = per_token.k3(r)
    found = signed_parts("a", r, k3, seq, step, cells).rows("a")
    ok = np.isfinite(r)
    keys = np.column_stack([found.seq, found.cells])
    for key in np.unique(keys, axis=0):  # a cell the tokens leave and come back to: two rows
        mine = np.all(keys == key, axis=1)
        at = ok & (seq == key[0]) & np.all(cells == key[1:], axis=1)
        assert set(found.step[mine]) == {step[at][0]}
        expect = [at.sum(), (r[at] < 0).sum(), np.expm1(r[at]).sum(), k3[at].sum()]
        assert np.allclose(found.sums[mine].sum(axis=0), expect)
    assert found.sums[:, 0].sum() == ok.sum() and found.cells.shape[1] == len(FIELDS)


def test_parts_merged_measure_as_one_pass() -> None:
    rng = np.random.default_rng(2)
    seq = np.sort(rng.integers(0, 40, 1200))
    cells = _cells(rng, seq)
    r = rng.normal(-0.01, 0.05, len(seq))
    k3 = per_token.k3(r)
    cut = int(np.searchsorted(seq, 20))  # parts hold whole sequences
    halves = [signed_parts("a", r[s], k3[s], seq[s], seq[s], cells[s])
              for s in (slice(0, cut), slice(cut, None))]  # fmt: skip
    merged = SignedParts().merge(halves[1]).merge(halves[0]).rows("a")
    whole = signed_parts("a", r, k3, seq, seq, cells).rows("a")
    for rows in (merged, whole):
        part = rows.cells[:, 2] == 0
        assert rows.sums[part, 0].sum() == (cells[:, 2] == 0).sum()
    a = one_signed(merged, merged.cells[:, 2] == 0)
    b = one_signed(whole, whole.cells[:, 2] == 0)
    assert a is not None and b is not None
    assert np.isclose(a.deficit, b.deficit) and np.isclose(a.deficit_z, b.deficit_z)


def _run(rng: np.random.Generator, noise_part: float, banned: bool) -> tuple:
    """Sequences of 40 tokens: the first 10 of each (turn position 0) are the part, with
    louder noise (a path) or a mask (a logit processor) there; the rest healthy noise."""
    seq = np.repeat(np.arange(120), 40)
    part = np.tile(np.arange(40) < 10, 120)
    r = _sampled(rng, len(seq), 0.05, False)
    r[part] = _sampled(rng, int(part.sum()), noise_part, banned)
    cells = np.zeros((len(seq), len(FIELDS)), np.int64)
    cells[:, 2] = np.where(part, 0, 1)
    cells[:, -1] = np.digitize(np.exp(-np.abs(r)), [0.5, 0.9])  # a stand-in for the bins
    rows = signed_parts("a", r, per_token.k3(r), seq, seq // 30, cells).rows("a")
    return rows, rows.cells[:, 2] == 0


def test_a_louder_noise_keeps_the_mean_ratio_a_mask_lowers_it() -> None:
    rng = np.random.default_rng(3)
    rows, part = _run(rng, 0.6, banned=False)
    loud = one_signed(rows, part)
    assert loud is not None and loud.excess_k3 > 0
    assert abs(loud.deficit_z) < 3 and loud.deficit_per_k3 < 1.5
    rows, part = _run(rng, 0.05, banned=True)
    mask = one_signed(rows, part)
    assert mask is not None and mask.excess_k3 > 0
    assert mask.deficit_z < -3 and mask.deficit_per_k3 > 4
    assert mask.below > mask.below_expected and mask.below_z > 3


def test_no_bin_with_rest_tokens_measures_nothing() -> None:
    rng = np.random.default_rng(4)
    seq = np.repeat(np.arange(4), 10)
    cells = _cells(rng, seq)
    r = rng.normal(0, 0.05, len(seq))
    rows = signed_parts("a", r, per_token.k3(r), seq, seq, cells).rows("a")
    assert one_signed(rows, np.ones(len(rows.seq), bool)) is None
    assert one_signed(SignedParts().rows("a"), np.zeros(0, bool)) is None


def test_a_rate_ratio_at_the_same_bins_with_a_sequence_clustered_interval() -> None:
    """A part at 3x the reference's K3 in every bin: the ratio is 3 whatever its bin mix, the
    interval holds it and shrinks with more sequences; no reference tokens, no ratio."""
    rng = np.random.default_rng(5)
    found = []
    for seqs in (40, 400):
        seq = np.repeat(np.arange(seqs), 30)
        part = np.tile(np.arange(30) < 8, seqs)
        bins = rng.integers(0, 3, len(seq))
        r = rng.normal(0, 0.02 * (1 + bins), len(seq)) * np.where(part, np.sqrt(3), 1)
        cells = np.zeros((len(seq), len(FIELDS)), np.int64)
        cells[:, 2], cells[:, -1] = np.where(part, 0, 1), bins
        rows = signed_parts("a", r, per_token.k3(r), seq, seq, cells).rows("a")
        found.append(rate_ratio(rows, rows.cells[:, 2] == 0, rows.cells[:, 2] == 1))
    small, large = found
    assert small is not None and large is not None
    assert large.ci[0] < large.ratio < large.ci[1] and abs(large.ratio - 3) < 0.3
    assert large.ci[1] - large.ci[0] < small.ci[1] - small.ci[0]
    assert large.tokens == 400 * 8
    rows = signed_parts("a", r, per_token.k3(r), seq, seq, cells).rows("a")
    assert rate_ratio(rows, rows.cells[:, 2] == 0, np.zeros(len(rows.seq), bool)) is None
