"""Which dimensions explain nothing: a homogeneity test of each dimension's cells.

A dimension is *uniform* when its cells' ratios to the search's final model (the baseline's
same cells, with the findings explained away) are consistent with one common ratio: Cochran's Q
does not reject at ``uniform_alpha``, or the DerSimonian-Laird between-cell spread is below
``uniform_spread``. Only cells known to within ``uniform_precision`` enter, and they must hold
``uniform_coverage`` of the tokens (a dimension is not called uniform for lack of data). With a
baseline they must also hold ``uniform_excess_share`` of the excess over it: when the values
precise enough to test are at the baseline's rate and the excess sits in the others (the few
rare tokens' probability bins, say), the dimension does not explain nothing, it holds the excess
in cells too small to test one by one. The
reported rate ratio is the inverse-variance pooled ratio of the cells to the baseline (with a
baseline; relative to the selection's own stratum rates without one). The stratum dimension is tested on
its rate ratios to the baseline directly (only with a baseline: without one it defines the
expectation). Uniform excess over every cell points at the policy (e.g. stale weights), not at
a code path.
"""

from __future__ import annotations

import math

import numpy as np

from mismatchctl.stats.localize.math import cochran, div, norm_ppf, relvar
from mismatchctl.stats.localize.result import UniformDim
from mismatchctl.stats.localize.search import Search


def uniform_dims(search: Search, dims: list[int]) -> list[UniformDim]:
    """The test of every listed dimension that has enough precise cells."""
    out = []
    for d in dims:
        test = _test(search, d)
        if test is not None:
            out.append(test)
    return out


def _ratios(search: Search, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each cell's ratio to the model (or to the baseline, for the stratum), the variance of its
    log, its rate ratio to the baseline and that one's variance."""
    t, ref, key = search.t, search.ref, (d,)
    a = t.a[key]
    own_var = relvar(t.v[key], a)
    if search.e_tb is None:
        ratio = div(a, search.model[key], np.nan)
        return ratio, own_var, ratio, own_var
    rr = div(a, search.e_tb[key] * ref.q[key], np.nan)
    rr_var = own_var + ref.q_var[key]
    if d == search.stratum:
        return rr, rr_var, rr, rr_var
    ratio = div(a, search.model[key], np.nan)
    return ratio, own_var + np.broadcast_to(ref.beta_var[key], a.shape), rr, rr_var


def _test(search: Search, d: int) -> UniformDim | None:
    th, t, key = search.th, search.t, (d,)
    ratio, var, rr, rr_var = _ratios(search, d)
    z95 = norm_ppf(0.975)
    with np.errstate(divide="ignore", invalid="ignore"):
        half = z95 * np.sqrt(var)
        keep = (t.n[key] >= th.min_tokens) & (t.g[key] >= th.min_sequences)
        keep &= np.broadcast_to(search.ref.supported[key], keep.shape)
        keep &= (ratio > 0) & np.isfinite(ratio) & (half <= math.log(th.uniform_precision))
        keep &= (rr > 0) & np.isfinite(rr) & np.isfinite(rr_var)
    coverage = float(t.n[key][keep].sum() / t.total_n)
    if keep.sum() < 2 or coverage < th.uniform_coverage:
        return None
    _, q, p, tau = cochran(np.log(ratio[keep]), var[keep])
    pooled, _, _, _ = cochran(np.log(rr[keep]), rr_var[keep])
    sd = math.sqrt(1.0 / float(np.sum(1.0 / rr_var[keep])))
    share = _excess_share(search, d, keep)
    elsewhere = share is not None and share < th.uniform_excess_share
    uniform = (p >= th.uniform_alpha or math.exp(tau) <= th.uniform_spread) and not elsewhere
    return UniformDim(
        dim=t.spec.dims[d].name,
        uniform=bool(uniform),
        cells=int(keep.sum()),
        coverage=coverage,
        rate_ratio=math.exp(pooled),
        rate_ratio_ci=(math.exp(pooled - z95 * sd), math.exp(pooled + z95 * sd)),
        spread=math.exp(tau),
        q=q,
        p_value=p,
        excess_share=share,
        excess_elsewhere=elsewhere,
    )


def _excess_share(search: Search, d: int, keep: np.ndarray) -> float | None:
    """The tested cells' share of the target's K3 mass above what the baseline's rates give
    (None without a baseline or without an excess)."""
    if search.e_tb is None:
        return None
    key = (d,)
    with np.errstate(invalid="ignore"):
        excess = np.nan_to_num(search.t.a[key] - search.e_tb[key] * search.ref.q[key])
    total = float(excess.sum())
    if total <= 0:
        return None
    return float(excess[keep].sum()) / total
