"""Partial behaviour: empty groups, None rules, shares, overflow, input checks, pickling."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from stats_helpers import assert_metrics_close, flatten, make_sequences, one_group

from mismatchctl.stats import (
    COUNT_METRICS,
    METRIC_NAMES,
    QUANTILE_METRICS,
    Partial,
    chunk_partials,
    merge_all,
    reference_metrics,
    shares,
)
from mismatchctl.stats.state import Col, merge_states


def test_empty_finalize() -> None:
    got = Partial.empty(with_hist=True).finalize()
    assert list(got) == [*METRIC_NAMES, *QUANTILE_METRICS]
    assert got["tokens"] == 0 and got["sequences"] == 0 and got["overflow_tokens"] == 0
    assert all(got[k] is None for k in got if k not in COUNT_METRICS)
    assert set(Partial.empty().finalize()) == set(METRIC_NAMES)
    assert reference_metrics([]) == Partial.empty().finalize()
    assert reference_metrics([(np.zeros(0), np.zeros(0))]) == Partial.empty().finalize()


def test_absent_groups_are_empty_and_inputs_of_length_zero() -> None:
    parts = chunk_partials(np.array([-1.0]), np.array([-1.5]), np.array([4]), np.array([2]), 4)
    assert [p.tokens for p in parts] == [0, 0, 1, 0]
    assert parts[0].finalize() == Partial.empty().finalize()
    none = chunk_partials(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), 3, with_hist=True)
    assert [p.tokens for p in none] == [0, 0, 0] and all(p.has_hist for p in none)


def test_pearson_is_none_when_undefined() -> None:
    one_token = one_group([(np.array([-1.0]), np.array([-2.0]))]).finalize()
    assert one_token["prob_pearson"] is None and one_token["log_ppl_pearson"] is None
    assert one_token["vllm_kl"] == pytest.approx(math.expm1(-1.0) + 1.0)
    const_rollout = [
        (np.full(4, -0.3), np.array([-0.1, -0.2, -0.3, -0.4])),
        (np.full(2, -0.3),) * 2,
    ]
    got = one_group(const_rollout).finalize()
    assert got["prob_pearson"] is None and got["log_ppl_pearson"] is None
    assert reference_metrics(const_rollout)["prob_pearson"] is None


def test_pearson_of_a_constant_is_none_even_when_its_mean_rounds() -> None:
    """exp(lr) here is a value whose rounded mean differs from itself: M2 comes out > 0."""
    seqs = [(np.full(3, -2.9903010033444817), np.array([-0.1, -0.2, -0.3]))]
    part = one_group(seqs)
    assert part.state[Col.PR_M2] > 0  # the trap: a tiny, non-zero variance of a constant
    assert part.finalize()["prob_pearson"] is None
    assert reference_metrics(seqs)["prob_pearson"] is None


def test_pearson_is_clamped_and_exact_for_perfect_correlation() -> None:
    lr = np.log(np.linspace(0.1, 0.9, 9))
    got = one_group([(lr, lr)]).finalize()
    assert got["prob_pearson"] == pytest.approx(1.0, abs=1e-15) and got["prob_pearson"] <= 1.0


def test_shares_and_low_prob_tokens() -> None:
    lr = np.log(np.array([1e-5, 0.5, 2e-3, 1e-4]))
    lt = lr + np.array([0.1, -0.2, 0.0, 0.3])
    parts = chunk_partials(lr, lt, np.array([0, 0, 1, 1]), np.array([0, 1, 1, 0]), 2)
    total = merge_all(parts)
    k3 = np.expm1(lt - lr) - (lt - lr)
    got = shares(parts[0], total)
    assert got["token_share"] == 0.5
    assert got["kl_share"] == pytest.approx((k3[0] + k3[3]) / k3.sum(), rel=1e-12)
    assert [p.low_prob_tokens for p in parts] == [2, 0] and total.low_prob_tokens == 2
    assert shares(parts[0], Partial.empty()) == {"token_share": None, "kl_share": None}


def test_overflow_is_inf_not_nan() -> None:
    seqs = [(np.array([-800.0]), np.array([0.0])), (np.array([-1.0]), np.array([-1.0]))]
    got = one_group(seqs).finalize()
    assert got["vllm_kl"] == math.inf and got["ratio_dev_1e4"] == math.inf
    assert got["rollout_ppl"] == math.inf
    assert math.isfinite(got["chi2_token"]) and math.isfinite(got["kl_k2"])
    assert_metrics_close(got, reference_metrics(seqs))


def test_overflow_tokens_are_counted_and_merge() -> None:
    """Tokens whose exp(r) is beyond float64 are counted (a mergeable count): r just above and
    just below log(float64 max) = 709.78..., spread over groups, merged in any order."""
    edge = float(np.log(np.finfo(np.float64).max))
    above, below = np.nextafter(edge, np.inf), edge
    seqs = [
        (np.array([-above, -0.1]), np.array([0.0, -0.1])),  # r just above: overflow
        (np.array([-below, -750.0]), np.array([0.0, 0.0])),  # r = edge: finite; r = 750
        (np.array([-1.0, -2.0]), np.array([-1.0, -1.5])),
        (np.array([-720.0]), np.array([-5.0])),  # r = 715
        (np.array([-0.5]), np.array([-800.0])),  # r = -799.5: exp(r) = 0, not an overflow
    ]
    with np.errstate(over="ignore"):
        want = int(sum(np.isinf(np.exp(lt - lr)).sum() for lr, lt in seqs))
    assert want == 3
    assert reference_metrics(seqs)["overflow_tokens"] == want
    parts = [one_group([s]) for s in seqs]
    assert [p.overflow_tokens for p in parts] == [1, 1, 0, 1, 0]
    assert merge_all(parts).finalize()["overflow_tokens"] == want
    assert merge_all(reversed(parts)).finalize()["overflow_tokens"] == want
    assert one_group(seqs).overflow_tokens == want


def test_histogram_presence_rules() -> None:
    seqs = make_sequences(np.random.default_rng(2), 5)
    with_hist, without = one_group(seqs, with_hist=True), one_group(seqs)
    assert with_hist.merge(Partial.empty()).has_hist
    assert not with_hist.merge(without).has_hist  # never quantiles of only part of the tokens
    assert not without.merge(with_hist).has_hist
    assert "log_ratio_p50" not in with_hist.merge(without).finalize()
    assert merge_all([], with_hist=True).has_hist and not merge_all([]).has_hist


def test_pickle_round_trip() -> None:
    part = one_group(make_sequences(np.random.default_rng(3), 4), with_hist=True)
    back = pickle.loads(pickle.dumps(part))
    assert back.finalize() == part.finalize() and np.array_equal(back.hist, part.hist)


@pytest.mark.parametrize(
    "args, message",
    [
        (([0.0], [0.0, 1.0], [0], [0], 1), "1-D of one length"),
        (([0.0], [0.0], [0], [1], 1), r"group codes must lie in 0\.\.0 \(found 1\.\.1\)"),
        (([0.0], [0.0], [0], [-1], 2), r"group codes must lie in 0\.\.1 \(found -1\.\.-1\)"),
        (([0.0], [0.0], [0], [0], 0), r"n_groups must be at least 1 \(found 0\)"),
        (([math.nan], [0.0], [0], [0], 1), "must be finite"),
        (([0.0], [-math.inf], [0], [0], 1), "must be finite"),
    ],
)
def test_input_checks(args, message) -> None:
    with pytest.raises(ValueError, match=message):
        chunk_partials(*(np.array(a) if isinstance(a, list) else a for a in args))


def test_repr() -> None:
    assert repr(Partial.empty()) == "Partial(tokens=0, sequences=0, hist=False)"


def test_table_merge_equals_pairwise_merges_exactly() -> None:
    """merge_states on (groups x fields) tables, the path engines can vectorize, is bit-identical."""
    rng = np.random.default_rng(4)
    tables = []
    for _ in range(2):
        lr, lt, seq = flatten(make_sequences(rng, 30))
        codes = rng.integers(0, 5, size=len(lr))
        tables.append(chunk_partials(lr, lt, seq, codes, 6))  # group 5 stays empty
    stacked = [np.stack([p.state for p in parts]) for parts in tables]
    merged = merge_states(*stacked)
    for g in range(6):
        assert np.array_equal(merged[g], tables[0][g].merge(tables[1][g]).state)
