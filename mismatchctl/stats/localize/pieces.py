"""Variances of the ranges of a token dimension, for every cell of a table at once.

A range of token-dimension values (``kv_position >= 1024``) within a cell of the other
dimensions holds values whose sequences overlap: its own variance is interpolated between
independent values and the Cauchy-Schwarz bound with the dimension's measured correlation
(``localize.tables.token_correlation``). The rest of the selection splits into disjoint pieces,
each computed from its own cells (never as the whole minus the range: a hot range's large
variance would swamp a cold rest's): first one piece per sequence dimension (the earlier ones
fixed, this one at any other value: exact moments, disjoint sequences, variances add), then one
per token dimension, the range's last (the sequence dimensions and earlier token dimensions
fixed, this one outside its value or range: interpolated, sharing sequences, standard
deviations add).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mismatchctl.stats.localize.math import own_var
from mismatchctl.stats.localize.tables import Dims, SideTables


def accumulate(x: np.ndarray, axis: int, kind: str | None, fn: Callable = np.cumsum) -> np.ndarray:
    """Sums (or another accumulation) of the ranges from the start (``le``) or the end
    (``ge``) of an axis."""
    if kind == "le":
        return fn(x, axis=axis)
    return np.flip(fn(np.flip(x, axis=axis), axis=axis), axis=axis)


def interpolated(vsum: np.ndarray, sdsum: np.ndarray, cbar: float) -> np.ndarray:
    """Variance of a union of token values from its values' variances and standard deviations."""
    return vsum + cbar * np.maximum(sdsum * sdsum - vsum, 0.0)


def token_range_vars(
    side: SideTables, dims: Dims, k: int, kind: str
) -> tuple[np.ndarray, np.ndarray]:
    """For every cell of table ``dims`` with axis ``k`` (a token dimension) a range from the
    start (``le``) or the end (``ge``): the variance of the range's mass and of the rest of the
    selection's (module docstring)."""
    spec, shape = side.spec, side.shape(dims)
    d_r = dims[k]
    v = side.v[dims]
    own = interpolated(accumulate(v, k, kind), accumulate(np.sqrt(v), k, kind), side.cbar[d_r])
    seq = [d for d in dims if not spec.is_token_dim(d)]
    tok = [d for d in dims if spec.is_token_dim(d) and d != d_r] + [d_r]
    rest_var = np.zeros(shape)
    fixed: Dims = ()
    for e in seq:
        with_e = tuple(sorted((*fixed, e)))
        piece = _lifted(side, side.mom[fixed], fixed, dims) - _lifted(
            side, side.mom[with_e], with_e, dims
        )
        rest_var = rest_var + own_var(piece)
        fixed = with_e
    rest_sd = np.zeros(shape)
    for e in tok:
        table = tuple(sorted((*fixed, e)))
        axis = table.index(e)
        ve = side.v[table]
        sde = np.sqrt(ve)
        if e == d_r:
            vs = ve.sum(axis=axis, keepdims=True) - accumulate(ve, axis, kind)
            sds = sde.sum(axis=axis, keepdims=True) - accumulate(sde, axis, kind)
        else:
            vs = ve.sum(axis=axis, keepdims=True) - ve
            sds = sde.sum(axis=axis, keepdims=True) - sde
        piece = np.sqrt(interpolated(np.maximum(vs, 0.0), np.maximum(sds, 0.0), side.cbar[e]))
        rest_sd = rest_sd + side.lift(piece, table, dims)
        fixed = table
    return own, rest_var + rest_sd * rest_sd


def _lifted(side: SideTables, arr: np.ndarray, sub: Dims, dims: Dims) -> np.ndarray:
    """Moments over ``sub`` (last axis the fields) shaped to broadcast over ``dims``."""
    shape = [side.spec.levels(d) if d in sub else 1 for d in dims]
    return np.asarray(arr).reshape([*shape, arr.shape[-1]])
