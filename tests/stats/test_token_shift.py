"""stats/token_shift: the seen-before flag against a loop over the tokens, the state's sums against
a direct computation, merged parts equal to one pass, the seen-token shift against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from mismatchctl.stats import per_token
from mismatchctl.stats.token_shift import (
    TokenShiftState,
    id_shift_share,
    seen_before,
    seen_shift,
    shifted_ids,
    token_shift_state,
)

BINS = 4


def _tokens(seed: int, n: int = 600) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    seq = np.sort(rng.integers(0, 12, n))
    ids = rng.integers(0, 40, n)
    ids[rng.random(n) < 0.05] = -1  # a few tokens without an id
    lr = -rng.exponential(1.0, n)
    lt = lr + rng.normal(0, 0.05, n)
    bins = rng.integers(0, BINS, n)
    return ids, lr, lt, seq, bins


def _loop_seen(ids: np.ndarray, seq: np.ndarray) -> np.ndarray:
    out, seen = [], {}
    for i, s in zip(ids.tolist(), seq.tolist(), strict=True):
        bag = seen.setdefault(s, set())
        out.append(i in bag)
        bag.add(i)
    return np.array(out)


def test_seen_before_is_an_earlier_token_of_the_same_sequence() -> None:
    ids, _, _, seq, _ = _tokens(1)
    known = ids >= 0
    assert np.array_equal(seen_before(ids[known], seq[known]), _loop_seen(ids[known], seq[known]))
    assert seen_before(np.zeros(0, np.int64), np.zeros(0, np.int64)).shape == (0,)


def test_state_sums_against_a_direct_computation() -> None:
    ids, lr, lt, seq, bins = _tokens(2)
    st = token_shift_state(ids, lr, lt, seq, bins, BINS)
    known = ids >= 0
    r = (lt - lr)[known]
    k = ids[known]
    assert st.without_id == int((~known).sum())
    for i in range(40):
        sel = k == i
        assert st.n[i] == sel.sum()
        assert st.r[i] == pytest.approx(r[sel].sum(), abs=1e-12)
        assert st.rr[i] == pytest.approx((r[sel] ** 2).sum(), abs=1e-12)
        assert st.k3[i] == pytest.approx((np.expm1(r[sel]) - r[sel]).sum(), abs=1e-12)
    flag = _loop_seen(k, seq[known])
    for s in (0, 1):
        for b in range(BINS):
            sel = (flag == bool(s)) & (bins[known] == b)
            assert st.seen[s, b, 0] == sel.sum()
            assert st.seen[s, b, 1] == pytest.approx(r[sel].sum(), abs=1e-12)


def test_merged_parts_equal_one_pass() -> None:
    ids, lr, lt, seq, bins = _tokens(3)
    whole = token_shift_state(ids, lr, lt, seq, bins, BINS)
    cut = int(np.searchsorted(seq, 6))  # parts keep sequences whole
    merged = TokenShiftState().merge(token_shift_state(ids[:cut], lr[:cut], lt[:cut], seq[:cut],
                                                       bins[:cut], BINS))  # fmt: skip
    merged = merged.merge(
        token_shift_state(ids[cut:], lr[cut:], lt[cut:], seq[cut:], bins[cut:], BINS)
    )
    for name in ("n", "r", "rr", "k3"):
        a, b = getattr(whole, name), getattr(merged, name)
        assert np.allclose(a, b[: len(a)], rtol=1e-12, atol=1e-12) and not b[len(a) :].any()
    assert np.allclose(whole.seen, merged.seen, rtol=1e-12, atol=1e-12)
    assert whole.without_id == merged.without_id


def test_a_penalty_on_repeated_tokens_is_a_seen_shift() -> None:
    ids, lr, lt, seq, bins = _tokens(4, 4000)
    known = ids >= 0
    flag = np.zeros(len(ids), bool)
    flag[known] = seen_before(ids[known], seq[known])
    quiet = seen_shift(token_shift_state(ids, lr, lt, seq, bins, BINS))
    assert quiet is not None and abs(quiet.z) < 4
    lr_pen = np.where(flag, lr - 0.05, lr)  # the engine lowered the repeated tokens
    found = seen_shift(token_shift_state(ids, lr_pen, lt, seq, bins, BINS))
    assert found is not None and found.shift == pytest.approx(0.05, abs=0.01) and found.z > 8
    # the shift against numpy: per bin, seen minus unseen, weighted by the seen tokens
    r = (lt - lr_pen)[known]
    f, b = flag[known], bins[known]
    w = np.array([(f & (b == k)).sum() for k in range(BINS)], float)
    d = [r[f & (b == k)].mean() - r[~f & (b == k)].mean() for k in range(BINS)]
    assert found.shift == pytest.approx(float(np.dot(w / w.sum(), d)), rel=1e-9)
    assert found.seen_share == pytest.approx(f.sum() / known.sum(), rel=1e-12)


def test_shifted_ids_name_the_biased_ids() -> None:
    ids, lr, lt, seq, bins = _tokens(5, 6000)
    lr = np.where((ids == 7) | (ids == 9), lr + 0.3, lr)  # a logit bias on two ids
    found = shifted_ids(token_shift_state(ids, lr, lt, seq, bins, BINS), 30, 0.1, 8.0)
    assert {s.token_id for s in found} == {7, 9}
    assert all(s.mean == pytest.approx(-0.3, abs=0.02) and s.z < -8 for s in found)
    tokens = sum(s.tokens for s in found) / int((ids >= 0).sum())
    assert sum(s.mass_share for s in found) > 5 * tokens  # they carry the K3, not the others


def test_id_shift_share_is_what_a_shift_per_id_carries() -> None:
    """Ids sharing one distribution carry next to nothing of r's variance; a constant shift on
    a fifth of the tokens' ids carries f (1 - f) s^2 of it, over the noise's variance."""
    ids, lr, lt, seq, bins = _tokens(6, 20000)
    quiet = id_shift_share(token_shift_state(ids, lr, lt, seq, bins, BINS), 30)
    assert quiet is not None and abs(quiet) < 0.01
    biased = ids < 8  # ids 0-7: a fifth of the tokens
    shift = 0.05
    found = id_shift_share(
        token_shift_state(ids, np.where(biased, lr + shift, lr), lt, seq, bins, BINS), 30
    )
    f = biased[ids >= 0].mean()
    between = f * (1 - f) * shift**2
    assert found == pytest.approx(between / (0.05**2 + between), abs=0.02)
    assert id_shift_share(TokenShiftState(), 30) is None
    few = token_shift_state(ids[:50], lr[:50], lt[:50], seq[:50], bins[:50], BINS)
    assert id_shift_share(few, 30) is None  # no id has 30 tokens


@pytest.mark.parametrize("missing", [False, True])
def test_the_callers_r_and_sequence_starts_give_the_same_state(missing: bool) -> None:
    """The engine hands in the slice's ``r``, K3 and sequence starts: the same sums, bit for
    bit, as the state's own (every token with an id, or some without)."""
    ids, lr, lt, seq, bins = _tokens(8)
    if not missing:
        ids = np.abs(ids)
    r = lt - lr
    k3 = per_token.k3(r)
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    own = token_shift_state(ids, lr, lt, seq, bins, BINS)
    given = token_shift_state(ids, lr, lt, seq, bins, BINS, k3=k3, r=r, starts=starts)
    for a, b in zip(vars(own).values(), vars(given).values(), strict=True):
        np.testing.assert_array_equal(a, b)
    known = np.abs(ids)  # ids >= 0, as the state hands them
    assert seen_before(known, seq, starts).tolist() == _loop_seen(known, seq).tolist()
    doubled = token_shift_state(ids, lr, lt, seq, bins, BINS, r=2 * r)
    assert not np.array_equal(doubled.seen[..., 1], own.seen[..., 1])  # r is the one given
