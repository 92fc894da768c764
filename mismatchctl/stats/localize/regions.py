"""Regions (a set of values per dimension) read from the cube's tables: per-stratum sums for the
estimators, and the moments of a region for its variances.

A region's cells (*atoms*) are the cells of its own table inside every mask. Its moments add
exactly across values of sequence dimensions (disjoint sequences). Across values of a token
dimension the atoms share sequences whose cross products the cube does not hold: the region's
own variance is then interpolated between independent atoms and the Cauchy-Schwarz bound with
the dimension's measured correlation (``localize.tables.token_correlation``). The findings'
bootstrap (``stats/cube/bootstrap.py``) gives the exact interval of a finding.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from mismatchctl.stats.cube.cube import Field
from mismatchctl.stats.localize.estimates import Sums
from mismatchctl.stats.localize.math import contrast_var, div, own_var, relvar
from mismatchctl.stats.localize.tables import Dims, Masks, SideTables


def region_dims(region: Masks) -> Dims:
    return tuple(sorted(region))


def _masked(side: SideTables, arr: np.ndarray, region: Masks, dims: Dims) -> np.ndarray:
    out = np.asarray(arr, np.float64)
    for d in dims:
        if d in region:
            out = out * side.lift(region[d], (d,), dims)
    return out


def region_sums(side: SideTables, region: Masks, stratum: int | None) -> Sums:
    """Tokens and mass of the region per stratum value (one value without a stratum)."""
    dims = region_dims(region)
    if stratum is None:
        n = _masked(side, side.n[dims], region, dims).sum()
        a = _masked(side, side.a[dims], region, dims).sum()
        return Sums(np.array([n]), np.array([a]))
    full = tuple(sorted({*dims, stratum}))
    if side.has(full):
        keep = full.index(stratum)
        axes = tuple(k for k in range(len(full)) if k != keep)
        n = _masked(side, side.n[full], region, full).sum(axis=axes)
        a = _masked(side, side.a[full], region, full).sum(axis=axes)
        return Sums(n, a)
    return _split_by_parent(side, region, stratum)


def _split_by_parent(side: SideTables, region: Masks, stratum: int) -> Sums:
    """A region of three non-stratum dimensions: each atom's tokens and mass split over the
    strata in the proportions of its most specific parent (fewest tokens) that the cube holds
    with the stratum."""
    dims = region_dims(region)
    n_s = np.zeros(side.spec.levels(stratum))
    a_s = np.zeros_like(n_s)
    atoms = np.argwhere(_masked(side, np.ones(side.shape(dims)), region, dims) > 0)
    for idx in atoms:
        best = None
        for k in range(len(dims)):
            parent = dims[:k] + dims[k + 1 :]
            pidx = tuple(int(i) for i in np.delete(idx, k))
            pn = float(side.n[parent][pidx])
            if side.has((*parent, stratum)) and (best is None or pn < best[0]):
                best = (pn, parent, pidx)
        cell = tuple(int(i) for i in idx)
        n, a = float(side.n[dims][cell]), float(side.a[dims][cell])
        if best is None:
            continue
        _, parent, pidx = best
        one = {d: _one_hot(side, d, v) for d, v in zip(parent, pidx, strict=True)}
        p = region_sums(side, one, stratum)
        n_s += n * div(p.n, p.n.sum())
        a_s += a * div(p.a, p.a.sum())
    return Sums(n_s, a_s)


def _one_hot(side: SideTables, d: int, v: int) -> np.ndarray:
    mask = np.zeros(side.spec.levels(d), bool)
    mask[v] = True
    return mask


class RegionMoments(NamedTuple):
    """A region's cube fields summed over its cells, the interpolation of its own variance
    across token values (``cbar`` None: the moments are exact) and its sequences."""

    mom: np.ndarray
    vsum: float
    sdsum: float
    cbar: float | None
    g: int

    def own(self) -> float:
        if self.cbar is None:
            return float(own_var(self.mom))
        return self.vsum + self.cbar * max(self.sdsum**2 - self.vsum, 0.0)

    def union(self) -> tuple[np.ndarray, np.ndarray, float] | None:
        if self.cbar is None:
            return None
        return np.array(self.vsum), np.array(self.sdsum), self.cbar


def region_moments(side: SideTables, region: Masks) -> RegionMoments:
    """The module docstring's rules; sequences exact for one cell, else a lower bound (the
    largest cell's count across token values)."""
    dims = region_dims(region)
    if not dims:
        return RegionMoments(
            side.total.copy(), float(side.v[()]), float(np.sqrt(side.v[()])), None, int(side.g[()])
        )
    inside = _masked(side, np.ones(side.shape(dims)), region, dims) > 0
    mom = side.mom[dims][inside].sum(axis=0)
    v = np.where(inside, side.v[dims], 0.0)
    multi = [d for d in dims if side.spec.is_token_dim(d) and np.count_nonzero(region[d]) > 1]
    cbar = max((side.cbar[d] for d in multi), default=None)
    g = np.where(inside, side.g[dims], 0.0)
    token_axes = tuple(k for k, d in enumerate(dims) if side.spec.is_token_dim(d))
    g = g.max(axis=token_axes) if token_axes else g
    return RegionMoments(mom, float(v.sum()), float(np.sqrt(v).sum()), cbar, int(g.sum()))


def complement_var(side: SideTables, region: Masks) -> float:
    """Variance of the mass of the rest of the selection (everything outside the region),
    from the rest's own cells: the rest splits into disjoint pieces, one per fixed dimension
    (the earlier dimensions inside the region, this one outside it), sequence dimensions
    first. Pieces split by a sequence dimension hold disjoint sequences (variances add); the
    pieces split by token dimensions share sequences (standard deviations add)."""
    spec = side.spec
    order = sorted(region, key=lambda d: (spec.is_token_dim(d), d))
    seq_var, token_sd = 0.0, 0.0
    for k, d in enumerate(order):
        piece = {e: region[e] for e in order[:k]}
        piece[d] = ~region[d]
        if not np.any(piece[d]):
            continue
        v = region_moments(side, piece).own()
        if spec.is_token_dim(d):
            token_sd += float(np.sqrt(v))
        else:
            seq_var += v
    return seq_var + token_sd * token_sd


def log_contrast_var(side: SideTables, region: Masks) -> float:
    """Variance of ``log A(R) - log A(rest)``: exact (covariance included) when the region's
    cells differ only in sequence dimensions; otherwise the region's and the rest's own
    variances, taken as independent (conservative: a sequence's parts co-vary positively)."""
    rm = region_moments(side, region)
    if rm.cbar is None:
        return float(contrast_var(rm.mom, side.total))
    a = float(rm.mom[Field.K3])
    return float(relvar(rm.own(), a) + relvar(complement_var(side, region), side.total_a - a))


def restrict(region: Masks, dims: frozenset[int]) -> Masks:
    """The region on the given dimensions only."""
    return {d: m for d, m in region.items() if d in dims}
