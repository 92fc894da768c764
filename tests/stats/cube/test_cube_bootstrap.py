"""The findings' bootstrap pass: the compiled accumulator equals a direct numpy bootstrap with the
same weights, merges over partitions, and its intervals come from the point estimators."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mismatchctl.stats.cube.bootstrap import (
    POISSON_CDF,
    RegionAccumulator,
    finalize,
    plan_bootstrap,
    poisson_weights,
    sequence_keys,
)
from mismatchctl.stats.cube.cells import SequenceCells
from mismatchctl.stats.cube.cube import Cube, kernel_layout
from mismatchctl.stats.localize.estimates import Sums, versus_rest
from mismatchctl.stats.localize.explain import explain
from tests.stats.cube.cube_reference import random_tokens, small_spec
from tests.stats.localize.localize_data import Plan, cube_of, generate, pair

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


# --- the bootstrap from the cells the cube's pass keeps (explain reads its tokens once) -------


def _cells(spec, data, keys, cuts=None):
    """The cells of ``data`` kept by ``Cube.add`` (in pieces at the token indices ``cuts``,
    each a sequence boundary), and the cube."""
    lr, lt, seq, tok, seqc = data
    cube = Cube(spec)
    bounds = cuts or [0, len(lr)]
    chunks = [
        cube.add(lr[a:b], lt[a:b], seq[a:b], tok[a:b], seqc, keys)
        for a, b in itertools.pairwise(bounds)
    ]
    return cube, chunks


@pytest.mark.parametrize("stratum_name", ["bin", "gpu", None])
def test_accumulator_from_cells_equals_tokens_and_direct(stratum_name: str | None) -> None:
    spec, data, keys, regions = _setup(3)
    stratum = None if stratum_name is None else spec.index(stratum_name)
    _, (cells,) = _cells(spec, data, keys)
    from_cells = RegionAccumulator(spec, regions, stratum, REPLICATES)
    from_cells.add_cells(cells)
    from_tokens = RegionAccumulator(spec, regions, stratum, REPLICATES)
    from_tokens.add(*data, keys)
    # tokens are integer sums: equal; K3 is summed per cell then per region, not per token
    np.testing.assert_array_equal(from_cells.state[..., 0], from_tokens.state[..., 0])
    np.testing.assert_allclose(from_cells.state, from_tokens.state, rtol=1e-12)
    if stratum is not None:
        direct = _direct(spec, data, keys, regions, stratum)
        np.testing.assert_allclose(from_cells.state, direct, rtol=1e-12)


def test_cells_hold_each_sequence_by_first_visit_and_leave_the_cube_unchanged() -> None:
    spec, data, keys, _ = _setup(4)
    lr, lt, seq, tok, seqc = data
    plain = Cube(spec)
    plain.add(*data)
    cube, (cells,) = _cells(spec, data, keys)
    np.testing.assert_array_equal(cube.state, plain.state)  # keeping cells changes no number
    tmul = kernel_layout(spec)[0]
    k3 = np.expm1(lt - lr) - (lt - lr)
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    assert cells.sequences == len(starts) and cells.ptr[0] == 0
    for si, start in enumerate(starts):
        stop = starts[si + 1] if si + 1 < len(starts) else len(seq)
        row = seq[start]
        assert cells.keys[si] == keys[row]
        np.testing.assert_array_equal(cells.seq_codes[si], seqc[row])
        combos = tok[start:stop].astype(np.int64) @ tmul
        first = combos[np.sort(np.unique(combos, return_index=True)[1])]
        a, b = cells.ptr[si], cells.ptr[si + 1]
        np.testing.assert_array_equal(cells.combo[a:b], first)  # in the order first visited
        for c, n, y in zip(cells.combo[a:b], cells.tokens[a:b], cells.k3[a:b], strict=True):
            assert n == np.sum(combos == c)
            assert y == pytest.approx(k3[start:stop][combos == c].sum(), rel=1e-12, abs=1e-300)
    assert cells.nbytes < 40 * (cells.cells + cells.sequences)


def test_cells_of_pieces_accumulate_as_the_whole() -> None:
    spec, data, keys, regions = _setup(5)
    seq = data[2]
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    cuts = [0, int(starts[7]), int(starts[7]), int(starts[50]), len(seq)]  # one piece empty
    _, chunks = _cells(spec, data, keys, cuts)
    assert chunks[1].sequences == 0
    pieces = RegionAccumulator(spec, regions, spec.index("bin"), REPLICATES)
    for chunk in chunks:
        pieces.add_cells(chunk)
    _, (whole_cells,) = _cells(spec, data, keys)
    whole = RegionAccumulator(spec, regions, spec.index("bin"), REPLICATES)
    whole.add_cells(whole_cells)
    np.testing.assert_array_equal(pieces.state, whole.state)  # the same sums in the same order


def test_bad_cells_are_refused() -> None:
    spec, data, keys, regions = _setup()
    with pytest.raises(ValueError, match="one key per row of seq_codes"):
        Cube(spec).add(*data, keys[:-1])
    _, (cells,) = _cells(spec, data, keys)
    narrow = SequenceCells(
        cells.keys, cells.seq_codes[:, :1], cells.ptr, cells.combo, cells.tokens, cells.k3
    )
    acc = RegionAccumulator(spec, regions, spec.index("bin"), REPLICATES)
    with pytest.raises(ValueError, match="codes of the 2 sequence dimensions"):
        acc.add_cells(narrow)
    with pytest.raises(ValueError, match="must hold the"):
        SequenceCells(cells.keys, cells.seq_codes, cells.ptr, cells.combo[:-1], cells.tokens,
                      cells.k3)  # fmt: skip
