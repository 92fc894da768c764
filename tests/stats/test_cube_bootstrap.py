"""The findings' bootstrap pass: the compiled accumulator equals a direct numpy bootstrap with the
same weights, merges over partitions, and its intervals come from the point estimators."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from cube_reference import random_tokens, small_spec
from localize_data import Plan, cube_of, generate, pair

from mismatchctl.stats.cube_bootstrap import (
    POISSON_CDF,
    RegionAccumulator,
    finalize,
    plan_bootstrap,
    poisson_weights,
    sequence_keys,
)
from mismatchctl.stats.localize import explain
from mismatchctl.stats.localize_estimates import Sums, versus_rest

REPLICATES = 37


def _setup(seed: int = 0):
    spec = small_spec(block_cap=128)
    lr, lt, seq, tok, seqc = random_tokens(spec, np.random.default_rng(seed), 80)
    keys = sequence_keys("run-a", np.arange(len(seqc)) * 7 + 3)
    regions = [
        {},
        {spec.index("step"): (1, 2, 5)},
        {spec.index("gpu"): (1,), spec.index("turn"): (0, 2)},
        {spec.index("turn_kind"): (1,), spec.index("step"): (0, 6)},
    ]
    return spec, (lr, lt, seq, tok, seqc), keys, regions


def _direct(spec, data, keys, regions, stratum):
    """Weighted sums per replicate, region and stratum, by plain numpy."""
    lr, lt, seq, tok, seqc = data
    r = lt - lr
    k3 = np.expm1(r) - r
    codes = np.concatenate([seqc[seq], tok], axis=1)
    w = poisson_weights(keys, REPLICATES)[:, seq]  # every token gets its sequence's weight
    strata = spec.dims[stratum].size
    out = np.zeros((REPLICATES, len(regions), strata, 2))
    for j, region in enumerate(regions):
        inside = np.ones(len(lr), bool)
        for d, values in region.items():
            inside &= np.isin(codes[:, d], values)
        s = codes[inside, stratum]
        for b in range(REPLICATES):
            out[b, j, :, 0] = np.bincount(s, w[b, inside], minlength=strata)
            out[b, j, :, 1] = np.bincount(s, w[b, inside] * k3[inside], minlength=strata)
    return out


@pytest.mark.parametrize("stratum_name", ["bin", "gpu"])  # a token and a sequence stratum
def test_accumulator_equals_direct_bootstrap(stratum_name: str) -> None:
    spec, data, keys, regions = _setup()
    stratum = spec.index(stratum_name)
    acc = RegionAccumulator(spec, regions, stratum, REPLICATES)
    acc.add(*data, keys)
    np.testing.assert_allclose(acc.state, _direct(spec, data, keys, regions, stratum), rtol=1e-12)


def test_accumulator_merges_partitions_at_sequence_boundaries() -> None:
    spec, data, keys, regions = _setup(1)
    lr, lt, seq, tok, seqc = data
    whole = RegionAccumulator(spec, regions, spec.index("bin"), REPLICATES)
    whole.add(*data, keys)
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    cuts = [0, int(starts[10]), int(starts[10]), int(starts[41]), len(seq)]  # one piece empty
    merged = RegionAccumulator(spec, regions, spec.index("bin"), REPLICATES)
    for a, b in itertools.pairwise(cuts):
        part = RegionAccumulator(spec, regions, spec.index("bin"), REPLICATES)
        part.add(lr[a:b], lt[a:b], seq[a:b], tok[a:b], seqc, keys)
        merged = merged.merge(part)
    np.testing.assert_allclose(merged.state, whole.state, rtol=1e-12)


def test_weights_are_stable_and_poisson() -> None:
    keys = sequence_keys("run-a", np.arange(20_000))
    again = sequence_keys("run-a", np.arange(20_000))
    np.testing.assert_array_equal(keys, again)
    assert not np.array_equal(keys, sequence_keys("run-b", np.arange(20_000)))
    # pinned: a change of the hash would change every interval ever reported
    pinned = sequence_keys("run", np.array([0, 1, 2]))
    assert [int(k) for k in pinned] == [0x1B0F5F5DD7920499, 0x249363A86E1A3BD7, 0xBD39BC37B3F91B41]
    assert poisson_weights(pinned, 4).tolist() == [[2, 1, 1], [2, 4, 3], [1, 1, 1], [1, 2, 0]]
    w = poisson_weights(keys, 3)
    for row in w:  # Poisson(1): mean 1, variance 1, P(0) = e^-1
        assert row.mean() == pytest.approx(1.0, abs=0.03)
        assert row.var() == pytest.approx(1.0, abs=0.05)
        assert np.mean(row == 0) == pytest.approx(np.exp(-1), abs=0.01)
    assert POISSON_CDF[-1] == pytest.approx(1.0, abs=1e-15)


def test_bad_keys_and_mismatched_accumulators_are_refused() -> None:
    spec, data, keys, regions = _setup()
    acc = RegionAccumulator(spec, regions, spec.index("bin"), REPLICATES)
    with pytest.raises(ValueError, match="one key per row"):
        acc.add(*data, keys[:-1])
    other = RegionAccumulator(spec, regions[:2], spec.index("bin"), REPLICATES)
    with pytest.raises(ValueError, match="different regions"):
        acc.merge(other)


def test_internal_finding_interval_equals_a_direct_bootstrap() -> None:
    """Without a baseline: the finding's interval is the percentile interval of the rest-relative
    ratio recomputed from the same weighted sums, and it brackets the point estimate."""
    plan = Plan(cause="kv", magnitude=5.0, seed=21, seqs_per_step=128)
    cube, tokens = cube_of(plan)
    expl = explain(cube)
    assert expl.findings
    bp = plan_bootstrap(expl, replicates=REPLICATES)
    acc, none = bp.accumulators(cube.spec)
    assert none is None
    keys = sequence_keys("target", np.arange(len(tokens.seqc)))
    acc.add(tokens.lr, tokens.lt, tokens.seq, tokens.tok, tokens.seqc, keys)
    got = finalize(bp, acc)[0]
    direct = _direct(cube.spec, tokens[:5], keys, bp.target_regions, bp.stratum)
    f = bp.findings[0]
    ratios = [
        float(versus_rest(Sums(*direct[b, f.t_region].T), Sums(*direct[b, f.t_all].T)).rate_ratio)
        for b in range(REPLICATES)
    ]
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    assert got.rate_ratio_ci == pytest.approx((lo, hi), rel=1e-9)
    assert got.replicates == REPLICATES
    assert lo < expl.findings[0].rate_ratio < hi


def test_baseline_finding_interval_brackets_the_point_and_the_delta_interval_agrees() -> None:
    plan = Plan(cause="kv", magnitude=5.0, seed=22, seqs_per_step=128)
    target, base = pair(plan)
    expl = explain(target, base)
    assert expl.findings
    bp = plan_bootstrap(expl, replicates=200)
    acc_t, acc_b = bp.accumulators(target.spec)
    t_tokens = generate(plan)
    b_tokens = generate(Plan(cause="healthy", seed=plan.seed + 10_000, seqs_per_step=128))
    acc_t.add(*t_tokens[:5], sequence_keys("t", np.arange(len(t_tokens.seqc))))
    acc_b.add(*b_tokens[:5], sequence_keys("b", np.arange(len(b_tokens.seqc))))
    with pytest.raises(ValueError, match="baseline's accumulator"):
        finalize(bp, acc_t)
    got = finalize(bp, acc_t, acc_b)[0]
    f = expl.findings[0]
    lo, hi = got.rate_ratio_ci
    assert lo < f.rate_ratio < hi
    d_lo, d_hi = f.rate_ratio_ci
    assert abs(np.log(lo / d_lo)) < 0.35 and abs(np.log(hi / d_hi)) < 0.35
    assert got.excess_share_ci[0] < f.excess_share < got.excess_share_ci[1]
