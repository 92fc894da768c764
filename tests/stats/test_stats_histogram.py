"""Quantiles of r from the mergeable histogram vs exact np.quantile, within the documented bound."""

from __future__ import annotations

import numpy as np
import pytest
from stats_helpers import make_sequences, one_group

from mismatchctl.stats import QUANTILES, chunk_partials, hist_lookup, histogram, reference_quantiles


def _bound(r: np.ndarray, p: float) -> float:
    """Documented error bound: RELATIVE_ERROR * max(|x_(j)|, |x_(j+1)|) + 1e-9 (+ rounding)."""
    xs = np.sort(r)
    j = int(np.floor((len(xs) - 1) * p))
    scale = max(abs(xs[j]), abs(xs[min(j + 1, len(xs) - 1)]))
    return histogram.RELATIVE_ERROR * scale + histogram.ABSOLUTE_FLOOR + 1e-14 * scale


def _logprobs(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Logprobs <= 0 whose difference lt - lr is exactly r."""
    return np.where(r > 0, -r, 0.0), np.where(r > 0, 0.0, r)


def _hist_quantiles(r: np.ndarray) -> dict:
    lr, lt = _logprobs(r)
    seq = np.arange(len(r))
    part = chunk_partials(lr, lt, seq, np.zeros(len(r), dtype=np.int64), 1, with_hist=True)[0]
    got = part.finalize()
    return {name: got[name] for name in QUANTILES}


def _check(r: np.ndarray) -> None:
    got, want = _hist_quantiles(r), reference_quantiles(r)
    for name, p in QUANTILES.items():
        err = abs(got[name] - want[name])
        assert err <= _bound(r, p), (name, got[name], want[name])


def test_resolution_constants() -> None:
    assert histogram.RELATIVE_ERROR < 0.01
    assert histogram.N_BINS == 5765
    assert histogram.hist_index(np.array([0.0, -0.0]))[0] == histogram.ZERO_BIN


@pytest.mark.parametrize("seed", range(6))
def test_realistic_r_within_bound(seed) -> None:
    rng = np.random.default_rng(seed)
    seqs = make_sequences(rng, 300, max_len=80)
    part = one_group(seqs, with_hist=True)
    r = np.concatenate([lt - lr for lr, lt in seqs])
    got, want = part.finalize(), reference_quantiles(r)
    for name, p in QUANTILES.items():
        assert abs(got[name] - want[name]) <= _bound(r, p), name


@pytest.mark.parametrize(
    "make",
    [
        lambda rng, n: rng.normal(0.0, 1e-3, n),
        lambda rng, n: rng.standard_cauchy(n) * 1e-2,
        lambda rng, n: np.exp(rng.uniform(np.log(1e-9), np.log(999.0), n)),
        lambda rng, n: -np.exp(rng.uniform(np.log(1e-9), np.log(999.0), n)),
        lambda rng, n: rng.choice([-1.0, 0.0, 1e-12, 3.0], n),
        lambda rng, n: rng.normal(0.0, 1e-10, n),
    ],
)
@pytest.mark.parametrize("n", [1, 2, 3, 101, 5000])
def test_distributions_within_bound(make, n) -> None:
    rng = np.random.default_rng(n)
    r = np.clip(make(rng, n), -999.0, 999.0)
    _check(r)


def test_values_on_bin_edges_within_bound() -> None:
    edges = 10.0 ** (
        histogram.LOG10_LO + np.arange(0, histogram.N_LOG + 1, 7) / histogram.PER_DECADE
    )
    r = np.concatenate([edges[edges < 999], -edges[edges < 999]])
    _check(r)


def test_all_zero_is_exactly_zero() -> None:
    got = _hist_quantiles(np.zeros(50))
    assert got == dict.fromkeys(QUANTILES, 0.0)


def test_overflow_is_clamped_to_exact_extremes() -> None:
    r = np.array([-5000.0, 2.0, 2.0, 2.0, 8000.0])
    got, want = _hist_quantiles(r), reference_quantiles(r)
    assert got["log_ratio_p50"] == pytest.approx(2.0, rel=histogram.RELATIVE_ERROR)
    for name in ("log_ratio_p01", "log_ratio_p99"):
        assert got[name] == pytest.approx(want[name], rel=histogram.RELATIVE_ERROR)
    two = np.array([-5000.0, 8000.0])  # one overflow value per side: each is an exact extreme
    assert _hist_quantiles(two) == pytest.approx(reference_quantiles(two), rel=1e-12)


def test_single_value_is_exact() -> None:
    got = _hist_quantiles(np.array([0.0123]))
    assert got == dict.fromkeys(QUANTILES, pytest.approx(0.0123, rel=1e-12))


def test_index_is_monotone() -> None:
    r = np.sort(np.random.default_rng(0).standard_cauchy(20000))
    r = np.concatenate([r, [0.0, 1e-300, -1e-300, 1e9, -1e9]])
    r.sort()
    assert np.all(np.diff(histogram.hist_index(r)) >= 0)
    assert histogram.hist_index(r).min() >= 0 and histogram.hist_index(r).max() < histogram.N_BINS


def test_empty_histogram_gives_none() -> None:
    assert histogram.quantiles(
        np.zeros(histogram.N_BINS, np.int64), np.inf, -np.inf
    ) == dict.fromkeys(QUANTILES)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_rank_interpolation_inside_a_bin(sign) -> None:
    """Dense values inside one bin: ranks place them far better than the bin width."""
    lo = 10.0 ** (histogram.LOG10_LO + 2400 / histogram.PER_DECADE)  # 1e1, a bin edge
    r = sign * lo * (1.0 + histogram.RELATIVE_ERROR * np.linspace(0.001, 0.999, 2001))
    got, want = _hist_quantiles(r), reference_quantiles(r)
    for name in QUANTILES:
        assert abs(got[name] - want[name]) <= 0.01 * histogram.RELATIVE_ERROR * lo, name


def test_compiled_index_equals_numpy_bins() -> None:
    """The compiled index (no logarithm: the bins' bounds, found with the numpy code) puts every
    value where the numpy code does: on and just below every bound, across all magnitudes and
    at the edges (zeros, subnormals, the overflow and underflow bins)."""
    from mismatchctl.stats import kernels

    tables = hist_lookup.index_tables()
    assert tables is not None  # this machine's log10 is monotone: the compiled path is the one run
    bounds = tables.bounds[1:-1]
    assert len(bounds) == histogram.N_LOG + 1 and np.all(np.diff(bounds) > 0)
    # the numpy code's own edges: within rounding of 1e-9 and 1e3 (9.99999999999998e-10 is in)
    assert bounds[0] == pytest.approx(histogram.ABSOLUTE_FLOOR, rel=1e-12)
    assert bounds[-1] == pytest.approx(histogram.OVERFLOW, rel=1e-12)
    rng = np.random.default_rng(3)
    r = rng.standard_normal(200_000) * 10.0 ** rng.uniform(-14, 6, 200_000)
    edges = np.concatenate([bounds, np.nextafter(bounds, 0), np.nextafter(bounds, np.inf)])
    odd = [0.0, -0.0, 5e-324, -5e-324, 1e-308, 1e300, -1e300, np.finfo(np.float64).max]
    r = np.concatenate([r, edges, -edges, odd])
    assert np.array_equal(kernels.hist_index(r, *tables), histogram.hist_index(r))
