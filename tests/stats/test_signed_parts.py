"""stats/signed_parts: the cells' sums against a direct computation, merged parts equal to one
pass, the one-signed test on tokens sampled from a small vocabulary (noise between two
distributions keeps the part's mean ratio at 1 however loud, a mask on the sampling side lowers
it by the banned mass), and the rate ratio at the same bins with its clustered interval."""

from __future__ import annotations

import numpy as np

from mismatchctl.stats import per_token
from mismatchctl.stats.signed_parts import (
    GROUPS,
    HASH,
    SignedParts,
    one_signed,
    rate_ratio,
    signed_parts,
)

VOCAB = 40
LEVELS = (4, 3, 3, 4)  # turn, KV, position in the turn, probability bin


def _codes(n: int, bins: np.ndarray) -> tuple[np.ndarray, ...]:
    i = np.arange(n)
    return np.minimum(i % 7 // 2, 3), i % 5 // 2, i % 3, bins


def _group(seq: np.ndarray) -> np.ndarray:
    return ((seq.astype(np.uint64) * np.uint64(HASH)) >> np.uint64(58)).astype(np.int64)


def test_each_cell_and_group_holds_its_tokens_sums() -> None:
    rng = np.random.default_rng(1)
    seq = np.sort(rng.integers(0, 300, 3000))
    codes = _codes(len(seq), rng.integers(0, 4, len(seq)))
    r = rng.normal(0, 0.05, len(seq))
    r[::50] = np.nan  # a token without a finite r is left out
    k3 = per_token.k3(r)
    sums = signed_parts("a", r, k3, seq, codes, LEVELS).runs["a"]
    assert sums.shape == (GROUPS, *LEVELS, 4)
    ok = np.isfinite(r)
    at = ok & (_group(seq) == _group(seq[:1])[0])
    for cell in {tuple(int(c[i]) for c in codes) for i in np.flatnonzero(at)}:
        mine = at & np.all([c == v for c, v in zip(codes, cell, strict=True)], axis=0)
        expect = [mine.sum(), (r[mine] < 0).sum(), np.expm1(r[mine]).sum(), k3[mine].sum()]
        assert np.allclose(sums[(_group(seq[:1])[0], *cell)], expect)
    assert sums[..., 0].sum() == ok.sum()
    assert len(np.unique(_group(seq))) > GROUPS // 2  # the ids spread over the groups


def test_parts_merged_equal_one_pass() -> None:
    rng = np.random.default_rng(2)
    seq = np.sort(rng.integers(0, 40, 1200))
    codes = _codes(len(seq), rng.integers(0, 4, len(seq)))
    r = rng.normal(-0.01, 0.05, len(seq))
    k3 = per_token.k3(r)
    cut = int(np.searchsorted(seq, 20))
    halves = [
        signed_parts("a", r[s], k3[s], seq[s], tuple(c[s] for c in codes), LEVELS)
        for s in (slice(0, cut), slice(cut, None))
    ]
    merged = SignedParts().merge(halves[1]).merge(halves[0])
    whole = signed_parts("a", r, k3, seq, codes, LEVELS)
    assert np.allclose(merged.runs["a"], whole.runs["a"])
    both = merged.merge(signed_parts("b", r, k3, seq, codes, LEVELS)).total()
    assert both is not None and np.allclose(both, 2 * whole.runs["a"])
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
    part = np.tile(np.arange(40) < 10, 120)
    r = _sampled(rng, len(seq), 0.05, False)
    r[part] = _sampled(rng, int(part.sum()), noise_part, banned)
    bins = np.digitize(np.exp(-np.abs(r)), [0.5, 0.9])  # a stand-in for the probability bins
    zero = np.zeros(len(seq), np.int64)
    codes = (zero, zero, np.where(part, 0, 1), bins)
    sums = signed_parts("a", r, per_token.k3(r), seq, codes, LEVELS).runs["a"]
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
    sums = signed_parts("a", r, per_token.k3(r), seq, _codes(40, seq % 4), LEVELS).runs["a"]
    assert one_signed(sums, np.ones(LEVELS, bool)) is None


def test_a_rate_ratio_at_the_same_bins_with_a_clustered_interval() -> None:
    """A part at 3x the reference's K3 in every bin: the ratio is 3 whatever its bin mix, the
    interval holds it and shrinks with more sequences; no reference tokens, no ratio."""
    rng = np.random.default_rng(5)
    found, sums = [], None
    for seqs in (40, 400):
        seq = np.repeat(np.arange(seqs), 30)
        part = np.tile(np.arange(30) < 8, seqs)
        bins = rng.integers(0, 3, len(seq))
        r = rng.normal(0, 0.02 * (1 + bins), len(seq)) * np.where(part, np.sqrt(3), 1)
        zero = np.zeros(len(seq), np.int64)
        codes = (zero, zero, np.where(part, 0, 1), bins)
        sums = signed_parts("a", r, per_token.k3(r), seq, codes, LEVELS).runs["a"]
        position = np.indices(LEVELS)[2]
        found.append(rate_ratio(sums, position == 0, position == 1))
    small, large = found
    assert small is not None and large is not None
    assert large.ci[0] < large.ratio < large.ci[1] and abs(large.ratio - 3) < 0.3
    assert large.ci[1] - large.ci[0] < small.ci[1] - small.ci[0]
    assert large.tokens == 400 * 8
    assert sums is not None and rate_ratio(sums, position == 0, position == 2) is None
