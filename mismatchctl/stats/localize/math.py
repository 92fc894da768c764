"""Small numeric pieces of the localization: the sandwich variance of a cell's K3 mass, shrunk
baseline ratios, normal and chi-square tails (the standard library: no scipy)."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

_NORMAL = NormalDist()


def norm_ppf(p: float) -> float:
    """Quantile of the standard normal."""
    return _NORMAL.inv_cdf(p)


_SCALARS = (float, np.float64)


def div(a: np.ndarray | float, b: np.ndarray | float, fill: float = 0.0) -> np.ndarray:
    """``a / b`` in float64 with ``fill`` where ``b`` is 0 (or the quotient is not finite),
    broadcasting as numpy does. The search calls it tens of thousands of times, most of them on
    two numbers: those are divided as Python floats (the same IEEE quotient, returned as
    numpy's float64 as an array's would be), the rest by numpy. No compiled ufunc: loading one
    cost a process 0.3-0.5 s (numba prepares its compiler for it), and calling one through
    numba's Python wrapper 4-7 us, where two numbers now take about 1."""
    if type(a) in _SCALARS and type(b) in _SCALARS:
        if b == 0.0:
            return np.float64(fill)
        q = float(a) / float(b)
        return np.float64(q if math.isfinite(q) else fill)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = np.divide(a, b, dtype=np.float64)
    if np.ndim(q) == 0:
        return np.float64(q if math.isfinite(q) else fill)
    return np.where(np.isfinite(q), q, fill)  # a quotient by 0 is never finite (IEEE 754)


def sandwich_var(
    n: np.ndarray, a: np.ndarray, yy: np.ndarray, xx: np.ndarray, xy: np.ndarray, g: np.ndarray
) -> np.ndarray:
    """Cluster-robust variance of a cell's K3 mass ``A`` given its tokens (sequences are the
    clusters): ``G/(G-1) sum_i (y_i - k x_i)^2`` with ``k = A / n``, expanded into the cube's
    moments ``yy - 2 k xy + k^2 xx``. The variance of ``log(A / n)`` is this over ``A^2`` (delta
    method). An empty cell has none; one sequence's cell (no residual to measure) gets its
    mass squared (a relative variance of 1), so that regions holding it stay honest."""
    k = div(a, n)
    with np.errstate(over="ignore", invalid="ignore"):
        resid = np.maximum(yy - 2.0 * k * xy + k * k * xx, 0.0)
        out = resid * div(g, g - 1.0, np.inf)
    return np.where(g >= 2, out, np.where(g == 1, yy, 0.0))


def own_var(mom: np.ndarray) -> np.ndarray:
    """:func:`sandwich_var` of cube cells (``mom``: the ``Field`` columns on the last axis)."""
    if np.ndim(mom) == 1:  # one region's sums: the refiner asks thousands of times
        return _sandwich_one(*(float(x) for x in mom[:6]))
    return sandwich_var(*(mom[..., k] for k in range(6)))


def _sandwich_one(n: float, a: float, yy: float, xx: float, xy: float, g: float) -> np.float64:
    """:func:`sandwich_var` of one cell in Python floats: the same operations in the same
    order (the same bits; ``np.maximum(r, 0.0)`` is 0.0 at either zero and NaN at NaN), a
    quarter of the time of numpy's on 0-d arrays."""
    if not g >= 2:
        return np.float64(yy if g == 1 else 0.0)
    k = float(div(a, n))
    r = yy - 2.0 * k * xy + k * k * xx
    resid = r if r > 0.0 or r != r else 0.0
    return np.float64(resid * float(div(g, g - 1.0, np.inf)))


def contrast_var(
    mom: np.ndarray,
    total: np.ndarray,
    union: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Variance of ``log A_c - log A_r``: a cell's K3 mass against the rest of the selection's,
    both given their tokens, sequences as clusters (delta method on the sandwich). With the
    sequence's totals ``X_i, Y_i`` and the cell's ``x_i, y_i``, the rest's residual is
    ``(Y_i - k_r X_i) - (y_i - k_r x_i)``; its square and its product with the cell's residual
    expand into the cube's moments and cross moments: exact, covariance included.

    ``union``: for a region whose cells differ in a token dimension (their sequences overlap,
    so their own second moments do not add), ``(sum of the cells' variances, sum of their
    standard deviations, cbar)``: the region's own variance is interpolated between independent
    cells and the Cauchy-Schwarz bound with the dimension's measured correlation ``cbar``, and
    the covariance with the rest is left out (conservative for positively correlated parts)."""
    f = [mom[..., k] for k in range(10)]
    n, a, yy, xx, xy, _g, cyy, cxy, cyx, cxx = f
    t_n, t_a, t_yy, t_xx, t_xy, t_g = (float(total[k]) for k in range(6))
    n_r, a_r = t_n - n, t_a - a
    k_c, k_r = div(a, n), div(a_r, n_r)
    scale = div(t_g, t_g - 1.0, np.inf)
    tot = t_yy - 2 * k_r * t_xy + k_r * k_r * t_xx
    cross = cyy - k_r * cyx - k_r * cxy + k_r * k_r * cxx
    q = yy - 2 * k_r * xy + k_r * k_r * xx
    with np.errstate(over="ignore", invalid="ignore"):
        if union is None:
            v_c = own_var(mom)
            cov = (cyy - k_r * cxy - k_c * cyx + k_c * k_r * cxx) - (
                yy - (k_c + k_r) * xy + k_c * k_r * xx
            )
            cov = cov * scale
        else:
            vsum, sdsum, cbar = union
            extra = cbar * np.maximum(sdsum * sdsum - vsum, 0.0)
            v_c, q, cov = vsum + extra, q + extra, 0.0
        v_r = np.maximum(tot - 2 * cross + q, 0.0) * scale
        var = relvar(v_c, a) + relvar(v_r, a_r) - 2 * div(cov, a * a_r)
        indep = relvar(v_c, a) + relvar(v_r, a_r)
    return np.where(np.isfinite(var) & (var > 0), var, indep)


def weighted(w: np.ndarray | float, var: np.ndarray | float) -> np.ndarray:
    """``w^2 var``: a variance scaled by a shrinkage weight, 0 where the weight is 0 (even for
    an infinite variance: a cell without data contributes its prior, not its noise)."""
    w, var = np.asarray(w, np.float64), np.asarray(var, np.float64)
    out = np.zeros(np.broadcast_shapes(w.shape, var.shape))
    np.multiply(w * w, var, out=out, where=w > 0)
    return out


def relvar(var: np.ndarray, mass: np.ndarray) -> np.ndarray:
    """``var / mass^2``: the variance of ``log(mass)``; ``inf`` for a mass of 0."""
    return div(var, np.asarray(mass, np.float64) ** 2, np.inf)


def shrink_weight(var: np.ndarray | float, tau2: float) -> np.ndarray:
    """Weight of a cell's own log ratio against its prior, normal-normal empirical Bayes:
    ``tau^2 / (tau^2 + v)`` (``v``: the variance of the cell's log ratio, ``tau^2``: the
    between-cell variance of the true log ratios around their priors); 0 without data."""
    v = np.asarray(var, np.float64)
    if not tau2 > 0:
        return np.zeros(v.shape)
    return np.where(np.isfinite(v), tau2 / (tau2 + np.where(np.isfinite(v), v, 0.0)), 0.0)


def shrunk_ratio(q: np.ndarray, w: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """``exp(w log q + (1 - w) log prior)``: a ratio shrunk toward its prior on the log scale
    (the prior where the ratio is not a positive number)."""
    q, w, prior = (np.asarray(x, np.float64) for x in (q, w, prior))
    ok = np.isfinite(q) & (q > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_q = np.where(ok, np.log(np.where(ok, q, 1.0)), 0.0)
        out = np.exp(np.where(ok, w, 0.0) * log_q + (1.0 - np.where(ok, w, 0.0)) * np.log(prior))
    return out


def dl_tau2(x: np.ndarray, var: np.ndarray) -> float:
    """DerSimonian-Laird estimate of the between-cell variance of ``x`` (log ratios around
    their priors) given their sampling variances; 0 with fewer than two cells."""
    ok = np.isfinite(x) & np.isfinite(var) & (var > 0)
    x, var = x[ok], var[ok]
    if len(x) < 2:
        return 0.0
    w = 1.0 / var
    mean = float(np.sum(w * x) / np.sum(w))
    q = float(np.sum(w * (x - mean) ** 2))
    denom = float(np.sum(w) - np.sum(w * w) / np.sum(w))
    return max(0.0, (q - (len(x) - 1)) / denom) if denom > 0 else 0.0


def chi2_sf(x: float, df: int) -> float:
    """Upper tail of the chi-square distribution: the regularized gamma ``Q(df/2, x/2)``
    (series below ``a + 1``, Lentz's continued fraction above; Numerical Recipes 6.2)."""
    if x <= 0:
        return 1.0
    a, z = df / 2.0, x / 2.0
    if z < a + 1.0:
        return 1.0 - _gamma_series(a, z)
    return _gamma_fraction(a, z)


def _gamma_series(a: float, z: float) -> float:
    term = total = 1.0 / a
    ap = a
    for _ in range(1000):
        ap += 1.0
        term *= z / ap
        total += term
        if abs(term) < abs(total) * 1e-15:
            break
    return total * math.exp(-z + a * math.log(z) - math.lgamma(a))


def _gamma_fraction(a: float, z: float) -> float:
    tiny = 1e-300
    b = z + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return math.exp(-z + a * math.log(z) - math.lgamma(a)) * h


def cochran(log_ratio: np.ndarray, var: np.ndarray) -> tuple[float, float, float, float]:
    """Homogeneity of log ratios with variances ``var``: the inverse-variance pooled log ratio,
    Cochran's Q, its chi-square p-value (k - 1 degrees of freedom) and the DerSimonian-Laird
    between-cell standard deviation."""
    w = 1.0 / var
    pooled = float(np.sum(w * log_ratio) / np.sum(w))
    q = float(np.sum(w * (log_ratio - pooled) ** 2))
    df = len(log_ratio) - 1
    denom = float(np.sum(w) - np.sum(w * w) / np.sum(w))
    tau2 = max(0.0, (q - df) / denom) if denom > 0 else 0.0
    return pooled, q, chi2_sf(q, df), math.sqrt(tau2)
