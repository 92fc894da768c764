"""``stats/per_token.py``: a token's K3 as every reader of tokens outside the kernels takes it
(tokens, show, the paired comparison, the routing pass, bisect)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from mismatchctl.stats import per_token
from mismatchctl.stats.per_token import k3


def test_k3_is_rho_minus_one_minus_r() -> None:
    r = np.array([-3.0, -0.5, 0.0, 1e-12, 0.25, 2.0])
    assert k3(r).tolist() == (np.expm1(r) - r).tolist()
    assert k3(r) == pytest.approx(np.exp(r) - 1.0 - r, rel=1e-9, abs=1e-15)
    # expm1 keeps a tiny r's K3 (r^2 / 2); exp(r) - 1 - r loses it to cancellation
    assert k3(np.array([1e-9]))[0] == pytest.approx(5e-19, rel=1e-6)


def test_k3_overflows_to_inf_quietly_and_keeps_the_dtype() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning would fail the test
        out = k3(np.array([800.0, -800.0]))
    assert out[0] == np.inf and out[1] == pytest.approx(799.0)
    assert k3(np.array([0.5], np.float32)).dtype == np.float32


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
