"""The numbers behind explain, each against an independent computation: sandwich and contrast
variances from per-sequence sums, expected masses and region sums from tokens, the exact
mix/rate/interaction split (rational arithmetic), the estimators, chi-square tails."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from mismatchctl.stats.cube.cube import Cube, Field
from mismatchctl.stats.decompose import decompose, shift_share
from mismatchctl.stats.localize.estimates import Sums, versus_baseline, versus_rest
from mismatchctl.stats.localize.math import (
    chi2_sf,
    cochran,
    contrast_var,
    div,
    dl_tau2,
    own_var,
    shrunk_ratio,
)
from mismatchctl.stats.localize.regions import region_moments, region_sums
from mismatchctl.stats.localize.result import _pct, ratio_text
from mismatchctl.stats.localize.tables import SideTables, expected_mass, stratum_rates
from tests.stats.cube.cube_reference import random_tokens, small_spec


def _data(seed: int = 0, n_seq: int = 120):
    spec = small_spec(block_cap=128)
    lr, lt, seq, tok, seqc = random_tokens(spec, np.random.default_rng(seed), n_seq)
    cube = Cube.from_tokens(spec, lr, lt, seq, tok, seqc)
    r = lt - lr
    k3 = np.expm1(r) - r
    codes = np.concatenate([seqc[seq], tok], axis=1)  # global order: sequence dims first
    return spec, cube, seq, k3, codes


def _direct_vars(seq, k3, inside):
    """Per-sequence sums of a cell and of the whole, then the sandwich variances by hand."""
    ids = np.unique(seq)
    x = np.array([np.sum(inside[seq == i]) for i in ids], float)
    y = np.array([np.sum(k3[(seq == i) & inside]) for i in ids])
    big_x = np.array([np.sum(seq == i) for i in ids], float)
    big_y = np.array([np.sum(k3[seq == i]) for i in ids])
    a_c, n_c = y.sum(), x.sum()
    a_r, n_r = big_y.sum() - a_c, big_x.sum() - n_c
    k_c, k_r = a_c / n_c, a_r / n_r
    e_c = y - k_c * x
    e_r = (big_y - y) - k_r * (big_x - x)
    g_c, g = np.sum(x > 0), len(ids)
    v_c = g_c / (g_c - 1) * np.sum(e_c[x > 0] ** 2)
    v_r = g / (g - 1) * np.sum(e_r**2)
    cov = g / (g - 1) * np.sum(e_c * e_r)
    return v_c, v_c / a_c**2 + v_r / a_r**2 - 2 * cov / (a_c * a_r)


@pytest.mark.parametrize("seed", range(3))
def test_sandwich_and_contrast_variances_equal_the_per_sequence_computation(seed: int) -> None:
    spec, cube, seq, k3, codes = _data(seed)
    d_gpu, d_bin = spec.index("gpu"), spec.index("bin")
    table = cube.table(["gpu", "bin"])
    total = cube.state[0]
    for g in range(2):
        for b in range(4):
            inside = (codes[:, d_gpu] == g) & (codes[:, d_bin] == b)
            if np.unique(seq[inside]).size < 2:
                continue
            v_c, var = _direct_vars(seq, k3, inside)
            assert float(own_var(table[g, b])) == pytest.approx(v_c, rel=1e-9)
            assert float(contrast_var(table[g, b], total)) == pytest.approx(var, rel=1e-8)


def test_expected_mass_is_the_sum_of_every_tokens_stratum_rate() -> None:
    """E(c) = sum over the cell's tokens of its stratum's mean K3: exact for one and two
    dimensions with the stratum."""
    spec, cube, _seq, k3, codes = _data(4)
    side = SideTables(cube)
    s = spec.index("bin")
    rates = stratum_rates(side, s)
    e = expected_mass(side, rates, s)
    per_token = rates[codes[:, s]]
    for dims in [(spec.index("gpu"),), (spec.index("step"), spec.index("turn"))]:
        direct = np.zeros(side.shape(dims))
        np.add.at(direct, tuple(codes[:, d] for d in dims), per_token)
        np.testing.assert_allclose(e[dims], direct, rtol=1e-10)
    assert float(e[()]) == pytest.approx(k3.sum(), rel=1e-10)  # own rates: E = A overall


def test_region_sums_and_moments_equal_token_sums() -> None:
    spec, cube, seq, k3, codes = _data(5)
    side = SideTables(cube)
    s, step, turn = spec.index("bin"), spec.index("step"), spec.index("turn")
    region = {step: np.isin(np.arange(7), [1, 4, 5]), turn: np.array([False, True, True])}
    inside = np.isin(codes[:, step], [1, 4, 5]) & np.isin(codes[:, turn], [1, 2])
    sums = region_sums(side, region, s)
    np.testing.assert_allclose(sums.n, np.bincount(codes[inside, s], minlength=4))
    np.testing.assert_allclose(sums.a, np.bincount(codes[inside, s], k3[inside], minlength=4))
    rm = region_moments(side, region)
    assert rm.mom[Field.TOKENS] == inside.sum()
    assert rm.mom[Field.K3] == pytest.approx(k3[inside].sum(), rel=1e-12)
    assert rm.cbar is not None  # two turn values: sequences shared
    seq_only = {step: region[step]}
    exact = region_moments(side, seq_only)
    assert exact.cbar is None  # steps hold disjoint sequences: moments add exactly
    in_steps = np.isin(codes[:, step], [1, 4, 5])
    v_c, _ = _direct_vars(seq, k3, in_steps)
    assert exact.own() == pytest.approx(v_c, rel=1e-9)
    assert exact.g == np.unique(seq[in_steps]).size


def _fraction_split(n_t, a_t, n_b, a_b):
    """The decomposition in exact rational arithmetic, with the module's conventions."""
    n_t, a_t, n_b, a_b = ([Fraction(x) for x in v] for v in (n_t, a_t, n_b, a_b))
    s_t = [x / sum(n_t) for x in n_t]
    s_b = [x / sum(n_b) for x in n_b]
    out = []
    for i in range(len(n_t)):
        k_t = a_t[i] / n_t[i] if n_t[i] else None
        k_b = a_b[i] / n_b[i] if n_b[i] else None
        k_b = k_b if k_b is not None else (k_t if k_t is not None else Fraction(0))
        k_t = k_t if k_t is not None else k_b
        out.append(((s_t[i] - s_b[i]) * k_b, s_b[i] * (k_t - k_b), (s_t[i] - s_b[i]) * (k_t - k_b)))
    total = sum(a_t) / sum(n_t) - sum(a_b) / sum(n_b)
    return out, total


def test_mix_rate_interaction_is_exact() -> None:
    """Against rational arithmetic, with a cell only the target has and one only the baseline
    has; the three terms sum to the change of vllm_kl."""
    n_t, a_t = [10, 0, 7, 3], [0.5, 0.0, 0.25, 0.125]
    n_b, a_b = [4, 6, 0, 5], [0.375, 0.0625, 0.0, 0.75]
    mix, rate, inter = shift_share(np.array(n_t), np.array(a_t), np.array(n_b), np.array(a_b))
    want, total = _fraction_split(n_t, a_t, n_b, a_b)
    for i, (m, r, x) in enumerate(want):
        assert mix[i] == pytest.approx(float(m), rel=1e-14, abs=1e-17)
        assert rate[i] == pytest.approx(float(r), rel=1e-14, abs=1e-17)
        assert inter[i] == pytest.approx(float(x), rel=1e-14, abs=1e-17)
    assert mix.sum() + rate.sum() + inter.sum() == pytest.approx(float(total), rel=1e-14)


def test_decompose_on_cubes_sums_to_the_change() -> None:
    spec, target, *_ = _data(6)
    _, base, *_ = _data(7)
    total = target.k3_sum / target.tokens - base.k3_sum / base.tokens
    out = decompose(target, base)
    assert [d.dim for d in out] == [d.name for d in spec.dims]
    for d in out:
        assert d.total == pytest.approx(total)
        assert d.mix + d.rate + d.interaction == pytest.approx(total, rel=1e-12)
        cells = sum(m + r + x for _, m, r, x in d.cells)
        assert cells == pytest.approx(total, rel=1e-12)
    step = next(d for d in out if d.dim == "step")
    assert len(step.cells) == 7  # a blocked dimension is split on its exact values


def test_estimators_reduce_to_plain_rates() -> None:
    """With equal token mixes and no shrinkage the rate ratio is k_T / k_B; without a
    baseline, the region against the rest at the same stratum rates."""
    k = np.array([1e-4, 1e-2, 0.5])
    t_all = Sums(np.array([1000.0, 100.0, 10.0]), np.array([0.2, 2.0, 9.0]))
    t_r = Sums(np.array([100.0, 10.0, 1.0]), np.array([0.05, 0.6, 2.0]))
    b_all = Sums(np.array([2000.0, 200.0, 20.0]), np.array([2000.0, 200.0, 20.0]) * k)
    b_r = Sums(np.array([200.0, 20.0, 2.0]), np.array([200.0, 20.0, 2.0]) * k * 1.5)
    est = versus_baseline(t_r, t_all, b_r, [], b_all, (1.0, []))
    k_t, k_b = t_r.a.sum() / t_r.n.sum(), b_r.a.sum() / b_r.n.sum()
    assert float(est.rate_ratio) == pytest.approx(k_t / k_b, rel=1e-12)
    assert float(est.excess) == pytest.approx(t_r.a.sum() - t_r.n.sum() * k_b, rel=1e-12)
    shrunk = versus_baseline(t_r, t_all, b_r, [], b_all, (0.0, []))  # all prior: Q_B = 1
    assert float(shrunk.rate_ratio) == pytest.approx(k_t / (k_b / 1.5), rel=1e-12)
    rest = versus_rest(t_r, t_all)
    rates = t_all.a / t_all.n
    e_r, e_all = np.sum(t_r.n * rates), np.sum(t_all.n * rates)
    want = (t_r.a.sum() / e_r) / ((t_all.a.sum() - t_r.a.sum()) / (e_all - e_r))
    assert float(rest.rate_ratio) == pytest.approx(want, rel=1e-12)


def test_shrinkage_and_between_cell_variance() -> None:
    assert float(shrunk_ratio(4.0, 1.0, 2.0)) == pytest.approx(4.0)
    assert float(shrunk_ratio(4.0, 0.0, 2.0)) == pytest.approx(2.0)
    assert float(shrunk_ratio(4.0, 0.5, 1.0)) == pytest.approx(2.0)  # geometric
    assert float(shrunk_ratio(0.0, 0.9, 3.0)) == pytest.approx(3.0)  # no ratio: the prior
    x = np.array([0.1, -0.1, 0.05, -0.05])
    assert dl_tau2(x, np.full(4, 0.1)) == 0.0  # spread below the noise
    spread = np.array([1.0, -1.0, 0.8, -0.8])
    var = np.full(4, 0.01)
    w = 1 / var
    q = np.sum(w * (spread - np.sum(w * spread) / w.sum()) ** 2)
    want = (q - 3) / (w.sum() - np.sum(w * w) / w.sum())
    assert dl_tau2(spread, var) == pytest.approx(want)
    _pooled, q2, p, tau = cochran(spread, var)
    assert q2 == pytest.approx(q) and tau == pytest.approx(math.sqrt(want)) and p < 1e-10


@pytest.mark.parametrize(
    ("x", "df", "want"),
    [
        (3.841458820694124, 1, 0.05),
        (18.307038053275146, 10, 0.05),
        (6.634896601021214, 1, 0.01),
        (0.5, 2, math.exp(-0.25)),
        (30.0, 2, math.exp(-15.0)),
        (2.0, 5, 0.8491450360846096),
    ],
)
def test_chi_square_tail(x: float, df: int, want: float) -> None:
    assert chi2_sf(x, df) == pytest.approx(want, rel=1e-9)


def test_numbers_in_sentences() -> None:
    assert [ratio_text(x) for x in (9.34, 14.2, 1000.4, 0.123, 6.1)] == [
        "9.3",
        "14",
        "1000",
        "0.12",
        "6.1",
    ]
    assert [_pct(x) for x in (0.71, 0.06, 0.004, None)] == ["71%", "6.0%", "0.4%", "n/a"]


def _div_reference(a: np.ndarray, b: np.ndarray, fill: float) -> np.ndarray:
    """``a / b`` element by element in Python floats, ``fill`` at a zero ``b`` or a quotient
    that is not finite."""
    out = []
    for x, y in zip(np.ravel(a).tolist(), np.ravel(b).tolist(), strict=True):
        q = x / y if y != 0 else math.inf
        out.append(q if math.isfinite(q) else fill)
    return np.array(out, np.float64).reshape(np.shape(a))


EDGES = [0.0, -0.0, 1.0, -3.0, 1e-300, 1e300, 7.0 / 3.0, math.inf, -math.inf, math.nan, 5e-324]


@pytest.mark.parametrize("fill", [0.0, math.nan, math.inf])
def test_div_is_the_quotient_or_the_fill_for_numbers_and_arrays(fill: float) -> None:
    """Every pair of edge values (zeros of either sign, overflow, underflow, infinities, NaN),
    as two numbers (Python's and numpy's floats), as arrays and broadcast: the same bits as the
    reference, float64 throughout (a float32 array is divided in float64)."""
    a, b = np.meshgrid(np.array(EDGES), np.array(EDGES))
    want = _div_reference(a, b, fill)
    got = div(a, b, fill)
    assert got.dtype == np.float64 and got.shape == a.shape
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))
    for x, y, w in zip(a.ravel().tolist(), b.ravel().tolist(), want.ravel().tolist(), strict=True):
        for one in (
            div(x, y, fill),
            div(np.float64(x), np.float64(y), fill),
            div(x, np.array(y), fill),
        ):
            assert type(one) is np.float64
            assert one.tobytes() == np.float64(w).tobytes(), (x, y)
    column = div(np.array(EDGES)[:, None], np.array([2.0, 0.0, 3.0]), fill)
    assert column.shape == (len(EDGES), 3) and np.isnan(column[:, 1]).all() == math.isnan(fill)
    small = div(np.array([1.0, 2.0], np.float32), np.array([3.0, 0.0], np.float32), fill)
    assert small.dtype == np.float64 and small[0] == 1.0 / 3.0


@pytest.mark.parametrize("seed", [0, 1])
def test_one_cells_sandwich_variance_is_the_tables_bit_for_bit(seed: int) -> None:
    """``own_var`` of one cell's sums (Python floats) and of the table it is a row of (numpy):
    the same bits in every cell, empty, one-sequence and zero-residual cells included."""
    _, cube, *_ = _data(seed)
    t = SideTables(cube)
    for dims in t.tables:
        mom = t.mom[dims].reshape(-1, t.mom[dims].shape[-1])
        table = own_var(mom)
        for i in range(len(mom)):
            assert np.float64(own_var(mom[i])).tobytes() == table[i].tobytes(), (dims, i)
    edge = np.array([[0, 0, 0, 0, 0, 0], [5, 2.0, 4.0, 5, 3.0, 1], [4, 2.0, 1.0, 4, 2.0, 2],
                     [4, 2.0, -1.0, 4, 2.0, 3]], np.float64)  # fmt: skip
    for row, want in zip(edge, own_var(edge), strict=True):
        assert np.float64(own_var(row)).tobytes() == np.float64(want).tobytes()


def test_overlaps_with_a_shared_memo_are_each_tables_own() -> None:
    """Explaining a finding away reads its overlap with every table, the exact overlaps and the
    shares' logs kept across tables (``memo``): each table's overlap is the one computed alone,
    bit for bit, on the tables the cube holds with the region and on those it models."""
    from mismatchctl.stats.localize.tables import overlap

    _, cube, *_ = _data(3)
    t = SideTables(cube)
    arr = expected_mass(t, stratum_rates(t, 0), 0)
    pair = next(dims for dims in t.tables if len(dims) == 2)
    region = {d: np.arange(t.spec.levels(d)) % 2 == 0 for d in pair}
    memo: dict[tuple, np.ndarray] = {}
    modelled = 0
    for dims in t.tables:
        shared = overlap(t, arr, region, dims, memo)
        alone = overlap(t, arr, region, dims)
        assert shared.tobytes() == alone.tobytes(), dims
        modelled += not t.has(tuple(sorted({*dims, *pair})))
    assert modelled and any(key[0] == "log" for key in memo if key and isinstance(key[0], str))
