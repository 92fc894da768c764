"""``exp`` and ``expm1`` by one polynomial (``stats/exp_poly.py``): within 1 and 2 ulp of the C
library's on every range a report meets, the C library's own values outside the fast range, and
the compiled loop (``kernels.token_exps``, ``kernels.exps``) the same bits as the numpy twin."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mismatchctl.stats import exp_poly, kernels, kernels_numpy

EDGES = np.array([
    0.0, -0.0, 1e-300, -1e-300, 5e-324, 3e-8, -3e-8, 0.34657359, -0.34657359, 0.5 * math.log(2),
    708.9, 709.0, 709.0000001, 709.5, 709.78, 709.79, 710.0, -707.9, -708.0, -708.0000001, -708.5,
    -745.1, -745.2, -746.0, 1e308, -1e308, np.inf, -np.inf,
])  # fmt: skip


def _ranges(n: int = 200_000) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {
        "logprobs": rng.normal(-0.5, 1.0, n).clip(-30.0, 0.0),
        "log-ratios": rng.normal(0.0, 0.05, n),
        "reduced range": rng.uniform(-0.36, 0.36, n),
        "wide": rng.uniform(-750.0, 712.0, n),
        "magnitudes": 10.0 ** rng.uniform(-300.0, 2.85, n) * rng.choice([-1.0, 1.0], n),
        "edges": EDGES,
    }


def _libm(f, x: np.ndarray) -> np.ndarray:
    out = []
    for v in x.tolist():
        try:
            out.append(f(v))
        except OverflowError:
            out.append(math.inf)
    return np.array(out)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


@pytest.mark.parametrize("name", list(_ranges()))
@pytest.mark.parametrize(("f", "twin", "ulps"), [(math.exp, exp_poly.exp, 1.0),
                                                 (math.expm1, exp_poly.expm1, 2.0)])  # fmt: skip
def test_within_an_ulp_or_two_of_the_c_library(name: str, f, twin, ulps: float) -> None:
    x = _ranges()[name]
    got, want = twin(x), _libm(f, x)
    normal = np.isfinite(want) & (np.abs(want) >= np.finfo(np.float64).tiny)
    err = np.abs(got[normal] - want[normal]) / np.spacing(np.abs(want[normal]))
    assert err.max() <= ulps, f"{err.max()} ulp on {name}"
    # beyond the normal results (subnormal, inf) and outside the fast range: the C library's;
    # a zero is a zero (expm1(-0.0) is +0.0 here: a sum of zeros of both signs)
    far = ~normal | (x < exp_poly.FAST_LO) | (x > exp_poly.FAST_HI)
    zero = want == 0.0
    assert np.array_equal(_bits(got[far & ~zero]), _bits(want[far & ~zero]))
    assert (got[zero] == 0.0).all()


def test_expm1_keeps_its_relative_accuracy_near_zero() -> None:
    x = np.array([1e-300, -1e-300, 1e-20, -1e-20, 3e-8, -3e-8, 1e-5, -1e-5])
    np.testing.assert_allclose(exp_poly.expm1(x), _libm(math.expm1, x), rtol=3e-16, atol=0.0)
    assert exp_poly.expm1(np.array([0.0]))[0] == 0.0 and exp_poly.exp(np.array([0.0]))[0] == 1.0


def test_nan_stays_nan() -> None:
    x = np.array([np.nan, 0.5])
    assert np.isnan(exp_poly.exp(x)[0]) and np.isnan(exp_poly.expm1(x)[0])
    pr, pt, rm1 = kernels.token_exps(x, np.array([0.0, np.nan]))
    assert np.isnan(pr[0]) and np.isnan(pt[1]) and np.isnan(rm1).all()


@pytest.mark.parametrize("name", list(_ranges()))
def test_the_compiled_loop_gives_the_twins_bits(name: str) -> None:
    x = _ranges()[name]
    y = np.roll(x, 1) if len(x) > 100 else np.zeros_like(x)
    for lr, lt in ((x, y), (y, x)):
        got = kernels.token_exps(lr, lt)
        want = kernels_numpy.token_exps(lr, lt)
        for a, b in zip(got, want, strict=True):
            assert np.array_equal(_bits(a), _bits(b))
        assert np.array_equal(_bits(kernels.exps(lr)), _bits(kernels_numpy.exps(lr)))
    assert np.array_equal(_bits(kernels_numpy.token_exps(x, y)[2]), _bits(exp_poly.expm1(y - x)))


def test_an_empty_slice() -> None:
    empty = np.zeros(0)
    assert all(len(a) == 0 for a in kernels.token_exps(empty, empty))
    assert len(kernels.exps(empty)) == 0 and len(exp_poly.exp(empty)) == 0
