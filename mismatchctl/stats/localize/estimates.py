"""The estimators of a finding, from per-stratum sums of regions: one code path for the point
estimates (sums from the cube) and for every bootstrap replicate (weighted sums from the second
pass, ``stats/cube/bootstrap.py``). Arrays may carry leading replicate axes; the strata are the
last axis.

With a baseline B, the target T's expected mass in a region R is B's rate in R adjusted to T's
token mix over the strata (probability bins):

    F(R) = E_T(R) Q_B(R'),   E_X(R) = sum_s n_X(R, s) k_B(s),   Q_B(R') = A_B(R') / E_B(R')

where ``k_B(s)`` is B's mean K3 in stratum s and ``R'`` is R restricted to the dimensions the two
selections share. ``Q_B`` is shrunk on the log scale, with a fixed weight (``localize.reference``:
empirical Bayes), toward the product of its one-dimension marginals' ratios (each shrunk toward
1 with its own weight).
The rate ratio is ``A_T(R) / F(R)``: with equal mixes it is exactly ``k_T(R) / k_B(R)``.

Without a baseline, the region is compared with the rest of the selection at the same token
probabilities: the expected mass uses the selection's own per-stratum rates, and the rate ratio
is ``(A(R) / E(R)) / ((A - A(R)) / (E - E(R)))`` (E = A over the whole selection).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from mismatchctl.stats.localize.math import div, shrunk_ratio


class Sums(NamedTuple):
    """Tokens and K3 mass of one region per stratum (last axis)."""

    n: np.ndarray
    a: np.ndarray


class Estimate(NamedTuple):
    rate_ratio: np.ndarray
    expected: np.ndarray  # F(R): the mass the reference predicts
    excess: np.ndarray  # A(R) - F(R)
    excess_share: np.ndarray  # of the selection's excess (baseline) or mass (no baseline)


def rates(total: Sums) -> np.ndarray:
    """Mean K3 per stratum."""
    return div(total.a, total.n)


def expected(region: Sums, k: np.ndarray) -> np.ndarray:
    return np.sum(region.n * k, axis=-1)


def shrunk_baseline_ratio(
    region: Sums, marginals: list[Sums], k: np.ndarray, weights: tuple[float, list[float]]
) -> np.ndarray:
    """``Q_B(R')`` shrunk toward the product of its marginals' shrunk ratios (1 without
    marginals); ``weights``: the region's and its marginals' shrinkage weights."""
    w_region, w_marginals = weights
    prior = np.ones(np.shape(region.a)[:-1])
    for m, w in zip(marginals, w_marginals, strict=True):
        prior = prior * shrunk_ratio(div(m.a.sum(-1), expected(m, k), np.nan), w, 1.0)
    return shrunk_ratio(div(region.a.sum(-1), expected(region, k), np.nan), w_region, prior)


def versus_baseline(
    t_region: Sums,
    t_all: Sums,
    b_region: Sums | None,
    b_marginals: list[Sums],
    b_all: Sums,
    weights: tuple[float, list[float]],
) -> Estimate:
    """The region's rate ratio to the baseline and its excess (module docstring);
    ``b_region`` None: the region shares no dimension with the baseline but the stratum
    (``Q_B = 1``)."""
    k = rates(b_all)
    e_t = expected(t_region, k)
    q = 1.0 if b_region is None else shrunk_baseline_ratio(b_region, b_marginals, k, weights)
    f = e_t * q
    a = t_region.a.sum(-1)
    total_excess = t_all.a.sum(-1) - expected(t_all, k)
    excess = a - f
    share = np.where(total_excess > 0, div(excess, total_excess, np.nan), np.nan)
    return Estimate(div(a, f, np.nan), f, excess, share)


def versus_rest(region: Sums, t_all: Sums) -> Estimate:
    """The region against the rest of the selection at the selection's own stratum rates."""
    k = rates(t_all)
    e_r, e_all = expected(region, k), expected(t_all, k)
    a_r, a_all = region.a.sum(-1), t_all.a.sum(-1)
    rest = div(a_all - a_r, e_all - e_r, np.nan)
    ratio = div(div(a_r, e_r, np.nan), rest, np.nan)
    f = e_r * rest
    excess = a_r - f
    return Estimate(ratio, f, excess, div(excess, a_all, np.nan))
