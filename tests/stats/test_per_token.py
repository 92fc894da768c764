"""``stats/per_token.py``: a token's K3 as every reader of tokens outside the kernels takes it
(tokens, show, the paired comparison, the routing pass, bisect)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from mismatchctl.stats import exp_poly, kernel_choice, kernels, kernels_numpy, per_token
from mismatchctl.stats.per_token import k3


def test_k3_is_rho_minus_one_minus_r() -> None:
    r = np.array([-3.0, -0.5, 0.0, 1e-12, 0.25, 2.0])
    assert k3(r).tolist() == (exp_poly.expm1(r) - r).tolist()
    assert k3(r) == pytest.approx(np.exp(r) - 1.0 - r, rel=1e-9, abs=1e-15)
    # expm1 keeps a tiny r's K3 (r^2 / 2); exp(r) - 1 - r loses it to cancellation
    assert k3(np.array([1e-9]))[0] == pytest.approx(5e-19, rel=1e-6)


def test_k3_overflows_to_inf_quietly_and_keeps_the_dtype() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning would fail the test
        out = k3(np.array([800.0, -800.0]))
    assert out[0] == np.inf and out[1] == pytest.approx(799.0)
    assert k3(np.array([0.5], np.float32)).dtype == np.float32


def test_expm1_takes_the_reports_polynomial_whichever_loop_runs_it() -> None:
    rng = np.random.default_rng(5)
    r = np.concatenate([rng.normal(0.0, 0.05, 3000), [0.0, -0.0, 1e-300, 709.5, 800.0, -800.0]])
    bits = exp_poly.expm1(r).view(np.int64)
    # the compiled loop and its numpy twin: the same bits as the report's per-token pass
    assert np.array_equal(kernels.expm1s(r).view(np.int64), bits)
    assert np.array_equal(kernels_numpy.expm1s(r).view(np.int64), bits)
    assert np.array_equal(kernels.token_exps(np.zeros_like(r), r)[2].view(np.int64), bits)
    # a large array goes to the compiled loop; either way, any shape, the same values
    big = np.resize(r, (4, int(kernel_choice.NUMPY_CALL / kernel_choice.EXP_COST) // 4 + 1))
    assert np.array_equal(per_token.expm1(big), exp_poly.expm1(big.reshape(-1)).reshape(big.shape))
    assert np.array_equal(per_token.expm1(r.reshape(2, -1)), exp_poly.expm1(r).reshape(2, -1))


def test_expm1_keeps_float32_and_an_empty_array() -> None:
    x = np.array([0.5, -0.25], np.float32)
    assert per_token.expm1(x).dtype == np.float32
    assert per_token.expm1(x).tolist() == np.expm1(x).tolist()
    assert per_token.expm1(np.zeros(0)).shape == (0,)


# the numpy K3 written out: ``np.expm1(x) - x`` of one name (a compiled loop's ``math.expm1`` and
# the device monitor's ``torch.expm1`` are their own forms, docs in ``stats/per_token.py``)
INLINE_K3 = re.compile(r"np\.expm1\((\w+)\) - \1\b")


def test_every_numpy_k3_of_the_package_is_per_token_k3() -> None:
    package = Path(per_token.__file__).parents[1]
    inline = [
        f"{path.relative_to(package)}:{n}"
        for path in sorted(package.rglob("*.py"))
        if path.name != "per_token.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if INLINE_K3.search(line.split("#")[0])
    ]
    assert inline == [], "K3 written inline (use stats.per_token.k3)"
