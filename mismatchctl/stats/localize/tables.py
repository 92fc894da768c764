"""One selection's cube read at the search level: per table, arrays shaped like the table.

Every table of the search (the empty conjunction and the conjunctions of 1..3 dimensions, a
blocked dimension in blocks) gives its tokens ``n``, K3 mass ``a``, the sandwich variance ``v``
of the mass and its sequences ``g``. Arrays of a table have one axis per dimension, in ascending
dimension order, so an array of a sub-conjunction broadcasts against it after
:meth:`SideTables.lift`.

Expected masses (:func:`expected_mass`) weigh each cell's tokens by a rate per *stratum* (the
probability bin): ``E(c) = sum_s n(c, s) k(s)`` from the table of ``c`` and the stratum when the
cube has it (conjunctions of at most two other dimensions); for conjunctions of three other
dimensions the expected rate per token comes from the log-linear model of their
sub-conjunctions' rates without a three-way interaction (``_parent_rate``): every pairwise mix
effect kept (taking one parent's mix alone made turn kinds differ by their probability mix).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Protocol

import numpy as np

from mismatchctl.stats.cube.cube import Cube, Field
from mismatchctl.stats.cube.spec import CubeSpec
from mismatchctl.stats.localize.math import div, own_var

Dims = tuple[int, ...]


class ByTable(Protocol):
    """Arrays by table, read one at a time (a dict, or the search's lazily updated model)."""

    def __getitem__(self, dims: Dims) -> np.ndarray: ...


class SideTables:
    """The search tables of one cube (see the module docstring). ``mom[dims]``: the cube's
    fields (last axis, ``Field`` order); ``cbar[d]``: for a token dimension, the measured
    correlation of its values' masses within sequences (``token_correlation``)."""

    def __init__(self, cube: Cube) -> None:
        self.spec: CubeSpec = cube.spec
        self._shapes: dict[Dims, tuple[int, ...]] = {}
        self.mom: dict[Dims, np.ndarray] = {}
        self.n: dict[Dims, np.ndarray] = {}
        self.a: dict[Dims, np.ndarray] = {}
        self.v: dict[Dims, np.ndarray] = {}
        self.g: dict[Dims, np.ndarray] = {}
        for t in self.spec.tables:
            if len(t.dims) == 1 and t.blocked[0] != self.spec.blocked(t.dims[0]):
                continue  # the exact table of a blocked dimension: not searched
            mom = cube.state[t.offset : t.offset + t.cells].reshape(*t.shape, len(Field))
            self.mom[t.dims] = mom
            self.n[t.dims], self.a[t.dims] = mom[..., Field.TOKENS], mom[..., Field.K3]
            self.g[t.dims] = mom[..., Field.SEQS]
            self.v[t.dims] = own_var(mom)
        self.total = self.mom[()].reshape(len(Field))
        self.cbar = {
            d: token_correlation(self, d)
            for d in range(len(self.spec.dims))
            if self.spec.is_token_dim(d)
        }

    @property
    def tables(self) -> list[Dims]:
        return list(self.n)

    def has(self, dims: Dims) -> bool:
        return tuple(sorted(dims)) in self.n

    def shape(self, dims: Dims) -> tuple[int, ...]:
        found = self._shapes.get(dims)
        if found is None:
            found = self._shapes[dims] = tuple(self.spec.levels(d) for d in dims)
        return found

    def lift(self, arr: np.ndarray, sub: Dims, dims: Dims) -> np.ndarray:
        """An array over ``sub`` (a subset of ``dims``) shaped to broadcast over ``dims``."""
        return np.asarray(arr).reshape([self.spec.levels(d) if d in sub else 1 for d in dims])

    @property
    def total_n(self) -> float:
        return float(self.n[()])

    @property
    def total_a(self) -> float:
        return float(self.a[()])


def token_correlation(side: SideTables, d: int) -> float:
    """How much of the Cauchy-Schwarz room the values of token dimension ``d`` use within
    sequences: ``(V - sum_v V_v) / ((sum_v sd_v)^2 - sum_v V_v)`` from the whole selection's
    sandwich variance and its values', clipped to [0, 1] (0: independent, 1: perfectly
    correlated). It interpolates the variance of a union of values (``contrast_var``); the
    whole's residuals also carry the differences between the values' rates, so it errs high."""
    v = side.v[(d,)]
    vsum, sdsum = float(v.sum()), float(np.sqrt(v).sum())
    room = sdsum * sdsum - vsum
    if not room > 0:
        return 1.0
    return float(np.clip((float(side.v[()]) - vsum) / room, 0.0, 1.0))


def table_order(side: SideTables) -> Iterator[Dims]:
    """The tables, coarser conjunctions first."""
    yield from sorted(side.tables, key=lambda d: (len(d), d))


def stratum_rates(side: SideTables, stratum: int | None) -> np.ndarray:
    """Mean K3 per stratum value (0 where the stratum has no tokens); one overall rate when
    there is no stratum."""
    if stratum is None:
        return np.array([div(side.total_a, side.total_n)])
    return div(side.a[(stratum,)], side.n[(stratum,)])


def expected_mass(
    side: SideTables, rates: np.ndarray, stratum: int | None
) -> dict[Dims, np.ndarray]:
    """Every table's expected mass under per-stratum ``rates`` (module docstring)."""
    out: dict[Dims, np.ndarray] = {}
    for dims in table_order(side):
        n = side.n[dims]
        if stratum is None:
            out[dims] = n * rates[0]
        elif stratum in dims:
            out[dims] = n * side.lift(rates, (stratum,), dims)
        elif side.has((*dims, stratum)):
            full = tuple(sorted((*dims, stratum)))
            weighted = side.n[full] * side.lift(rates, (stratum,), full)
            out[dims] = weighted.sum(axis=full.index(stratum))
        else:
            out[dims] = n * _parent_rate(side, out, dims)
    return out


def _parent_rate(side: SideTables, done: dict[Dims, np.ndarray], dims: Dims) -> np.ndarray:
    """Expected mass per token of the cells of a table the cube does not hold with the
    stratum: the log-linear model without a three-way interaction,
    ``e(c) = prod_pairs e(pair) e(all) / prod_singles e(single)`` over the cell's
    sub-conjunctions (every pairwise mix effect kept); where a factor is missing, the rate of
    the most specific parent (fewest tokens)."""
    shape = side.shape(dims)

    def rate(sub: Dims) -> np.ndarray:
        return np.broadcast_to(side.lift(div(done[sub], side.n[sub], np.nan), sub, dims), shape)

    log_rate = np.zeros(shape)
    for order, sign in ((len(dims) - 1, 1.0), (len(dims) - 2, -1.0), (len(dims) - 3, 1.0)):
        if order < 0:
            continue
        for sub in itertools.combinations(dims, order):
            with np.errstate(divide="ignore", invalid="ignore"):
                log_rate = log_rate + sign * np.log(rate(sub))
    loglinear = np.exp(log_rate)
    best_n = np.full(shape, np.inf)
    fallback = np.zeros(shape)
    for sub in itertools.combinations(dims, len(dims) - 1):
        pn = np.broadcast_to(side.lift(side.n[sub], sub, dims), shape)
        better = pn < best_n
        best_n = np.where(better, pn, best_n)
        fallback = np.where(better, np.nan_to_num(rate(sub)), fallback)
    return np.where(np.isfinite(loglinear) & (loglinear > 0), loglinear, fallback)


Masks = dict[int, np.ndarray]  # dimension -> boolean mask over its search-level values


def masked_sum(side: SideTables, arr: dict[Dims, np.ndarray], region: Masks) -> float:
    """Sum of a per-table quantity over a region (from the region's own table)."""
    dims = tuple(sorted(region))
    return float(np.sum(arr[dims] * _mask_product(side, region, dims)))


def _mask_product(side: SideTables, region: Masks, dims: Dims) -> np.ndarray:
    out = np.ones([1] * len(dims))
    for d in region:
        if d in dims:
            out = out * side.lift(region[d], (d,), dims)
    return out


def overlap(
    side: SideTables,
    arr: ByTable,
    region: Masks,
    dims: Dims,
    memo: dict[tuple, np.ndarray] | None = None,
) -> np.ndarray:
    """For every cell ``c`` of table ``dims``: the quantity (an additive one such as an expected
    mass) in ``c`` and the region. Exact from the table of both conjunctions when the cube has
    it; otherwise ``X(c)`` times the share of ``c`` inside the region, modelled log-linearly:
    the share given the dimensions ``c`` and the region share, times, for each other dimension
    of ``c`` whose table with the region the cube holds, how much its value moves that share
    (a long-KV finding covers later turns more than first turns). ``memo``: the exact overlaps
    and the logs of the shares already computed for this ``arr`` and region (shared by calls
    over many tables; valid while neither changes)."""
    memo = {} if memo is None else memo

    def exact(sub: Dims) -> np.ndarray:
        if sub not in memo:
            memo[sub] = _exact_overlap(side, arr, region, sub)
        return memo[sub]

    def log_share_of(sub: Dims) -> np.ndarray:
        """The log of the region's share of each cell of ``sub``: one per table of the
        conjunctions ``sub`` is part of (every table asks for a few of them)."""
        key = ("log", sub)
        if key not in memo:
            with np.errstate(divide="ignore", invalid="ignore"):
                memo[key] = np.log(div(exact(sub), arr[sub], np.nan))
        return memo[key]

    rdims = tuple(sorted(region))
    union = tuple(sorted(set(dims) | set(rdims)))
    if side.has(union):
        return exact(dims)
    shared = tuple(d for d in dims if d in region)
    log_base = side.lift(log_share_of(shared), shared, dims)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_share = log_base * np.ones(side.shape(dims))
        for d in dims:
            sub = tuple(sorted((*shared, d)))
            if d in shared or not side.has(tuple(sorted({*sub, *rdims}))):
                continue
            moved = side.lift(log_share_of(sub), sub, dims) - log_base
            log_share = log_share + np.where(np.isfinite(moved), moved, 0.0)
        share = np.clip(np.nan_to_num(np.exp(log_share), nan=0.0), 0.0, 1.0)
    return arr[dims] * share


def _parent(side: SideTables, d: int) -> tuple[int, np.ndarray] | None:
    """The dimension ``d`` is a known function of (``Dim.function_map``; neither in blocks) and
    ``d``'s code for each of its codes, or None."""
    dim = side.spec.dims[d]
    if not dim.function_map:  # a Dim with a map names its function_of
        return None
    p = side.spec.index(str(dim.function_of))
    if side.spec.blocked(p) or side.spec.blocked(d):
        return None
    return p, np.asarray(dim.function_map, dtype=np.int64)


def on_parents(side: SideTables, region: Masks) -> Masks:
    """The same tokens as ``region``, with each dimension that is a known function of another
    (the turn kind of the turn) written on that other: a turn-kind region is a set of turns,
    and the cube holds the turn's tables with every other dimension."""
    out = dict(region)
    for d in region:
        found = _parent(side, d)
        if found is None:
            continue
        p, fmap = found
        mask = np.asarray(region[d], dtype=bool)[fmap]  # a turn is in when its kind is
        out[p] = out[p] & mask if p in out else mask
        del out[d]
    return out


def _exact_overlap(side: SideTables, arr: ByTable, region: Masks, dims: Dims) -> np.ndarray:
    """The quantity in each cell of ``dims`` and the region, from their joint table."""
    union = tuple(sorted(set(dims) | set(region)))
    inside = arr[union] * _mask_product(side, region, union)
    extra = tuple(union.index(d) for d in union if d not in dims)
    return inside.sum(axis=extra) if extra else inside
