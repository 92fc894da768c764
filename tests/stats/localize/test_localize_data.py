"""The planted data of the localization tests (localize_data.py): the K3 scaling's bisection
stops once no bracket moves, with the bits of all its 200 rounds."""

from __future__ import annotations

import numpy as np
import pytest

from tests.stats.localize.localize_data import k3, scaled_k3


def _every_round(r: np.ndarray, factor: float) -> np.ndarray:
    """The bisection run to its 200 rounds (the generator's before it stopped early)."""
    want = factor * k3(r)
    neg = r < 0
    lo = np.where(neg, -(want + 2.0), 0.0)
    hi = np.where(neg, 0.0, np.sqrt(2.0 * want) + 1.0)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        above = k3(mid) > want
        lo = np.where(neg, np.where(above, mid, lo), np.where(above, lo, mid))
        hi = np.where(neg, np.where(above, hi, mid), np.where(above, mid, hi))
    return 0.5 * (lo + hi)


@pytest.mark.parametrize("factor", [0.7, 2.0, 30.0, 1000.0])
def test_scaled_k3_has_the_bits_of_every_round(factor: float) -> None:
    rng = np.random.default_rng(0)
    r = 0.008 * (0.02 + rng.exponential(0.6, 20_000)) * np.clip(rng.standard_t(5, 20_000), -30, 30)
    r = np.r_[r, 0.0, -0.0, 1e-300, -1e-300, 5e-8, -5e-8, 3.0, -3.0]
    got = scaled_k3(r, factor)
    assert np.array_equal(got, _every_round(r, factor))
    # K3 = expm1(r) - r cancels for the smallest |r|: the tolerance is absolute below 1e-9
    np.testing.assert_allclose(k3(got), factor * k3(r), rtol=1e-9, atol=1e-18)
