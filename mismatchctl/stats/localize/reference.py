"""What the baseline contributes to each target cell: its shrunk ratio ``Q_B(c')`` (for the
rate ratio) and its local contrast ``beta(c')`` (for the specificity), on the dimensions the two
selections share (``c'``: the cell restricted to them). See ``localize.estimates`` and
docs/explain.md.

``beta(c') = Q_B(c') / Q_B(rest of the baseline)``: how much hotter the baseline itself is in
``c'`` than in the rest of it, at the same token probabilities. A target cell is *specific* when
it is hotter than its rest by more than that. The variance of ``log beta`` is the baseline's
exact cell-versus-rest contrast variance (``localize.math.contrast_var``), times the square of
the weight the shrinkage gives the cell's own data (``_own``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mismatchctl.stats.localize.math import (
    contrast_var,
    div,
    dl_tau2,
    relvar,
    shrink_weight,
    shrunk_ratio,
    weighted,
)
from mismatchctl.stats.localize.tables import Dims, SideTables

Arrays = dict[Dims, np.ndarray]


@dataclass
class Reference:
    """Per target table (arrays over the table's shape, or broadcastable to it)."""

    beta: Arrays = field(default_factory=dict)  # local contrast of the baseline
    beta_var: Arrays = field(default_factory=dict)  # variance of log beta
    q: Arrays = field(default_factory=dict)  # shrunk Q_B(c')
    q_var: Arrays = field(default_factory=dict)  # variance of log Q_B(c')
    supported: Arrays = field(default_factory=dict)  # the baseline has enough sequences
    tau2: dict[Dims, float] = field(default_factory=dict)  # per baseline table (shared dims)

    def weight(self, sub: Dims, var: np.ndarray | float) -> np.ndarray:
        """Shrinkage weight of a baseline region on the shared dimensions ``sub`` whose log
        ratio has variance ``var``."""
        return shrink_weight(var, self.tau2.get(tuple(sorted(sub)), 0.0))


def no_reference(t: SideTables) -> Reference:
    """Without a baseline: beta = q = 1 everywhere, no variance."""
    ref = Reference()
    for dims in t.tables:
        one = np.ones([1] * len(dims))
        ref.beta[dims] = ref.q[dims] = one
        ref.beta_var[dims] = ref.q_var[dims] = 0 * one
        ref.supported[dims] = np.ones([1] * len(dims), bool)
    return ref


def baseline_reference(
    t: SideTables,
    b: SideTables,
    e_b: Arrays,
    stratum: int | None,
    compared: frozenset[int],
    min_sequences: int,
) -> Reference:
    """The baseline's ratios for every target table, lifted to the table's shape."""
    own: dict[Dims, tuple[np.ndarray, ...]] = {}
    ref = Reference()
    for dims in sorted(t.tables, key=len):
        sub = tuple(d for d in dims if d in compared)
        if sub not in own:
            own[sub] = _own(b, e_b, sub, stratum, own, min_sequences)
            ref.tau2[sub] = float(own[sub][5])
        for store, value in zip(
            (ref.beta, ref.beta_var, ref.q, ref.q_var, ref.supported), own[sub][:5], strict=True
        ):
            store[dims] = t.lift(value, sub, dims)
    return ref


def _own(
    b: SideTables,
    e_b: Arrays,
    sub: Dims,
    stratum: int | None,
    done: dict[Dims, tuple],
    min_sequences: int,
) -> tuple:
    """(beta, var log beta, Q, var log Q, supported, tau^2) of the baseline's table ``sub``.

    ``Q``: the cells' ratios shrunk (empirical Bayes on the log scale) toward their prior, the
    product of their one-dimension marginals' shrunk ratios (1 for a one-dimension table), with
    the table's between-cell variance ``tau^2`` estimated by DerSimonian-Laird over its cells
    with ``min_sequences`` (a healthy baseline's cells differ by noise only: ``tau^2`` near 0,
    its noise is not taken for structure; a baseline with a real pattern keeps it)."""
    others = tuple(d for d in sub if d != stratum)
    if not others:  # nothing but the stratum: B's own stratum rates define the expectation
        one = np.ones(b.shape(sub))
        return one, 0 * one, one, _var_q(b, sub, one), np.ones(b.shape(sub), bool), 0.0
    prior = np.ones([1] * len(sub))
    if len(sub) >= 2:
        for d in others:
            prior = prior * b.lift(done[(d,)][2], (d,), sub)
    a, v = b.a[sub], b.v[sub]
    own_q, own_var = div(a, e_b[sub], np.nan), relvar(v, a)
    supported = b.g[sub] >= min_sequences
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.log(own_q) - np.log(np.broadcast_to(prior, own_q.shape))
    tau2 = dl_tau2(x[supported], own_var[supported])
    w = shrink_weight(own_var, tau2)
    q = shrunk_ratio(own_q, w, prior)
    rest_a, rest_e = b.total_a - a, float(e_b[()]) - e_b[sub]
    rest_q = div(rest_a, rest_e, np.nan)
    ok = (rest_a > 0) & (rest_e > 0) & np.isfinite(rest_q)
    beta = np.where(ok, div(q, np.where(ok, rest_q, 1.0)), q)
    contrast = contrast_var(b.mom[sub], b.total)
    beta_var = weighted(w, np.where(ok, contrast, own_var))
    q_var = weighted(w, own_var)
    return beta, beta_var, q, q_var, supported, tau2


def _var_q(b: SideTables, sub: Dims, one: np.ndarray) -> np.ndarray:
    """Variance of the baseline's level behind a cell with no shared dimension but the stratum:
    its stratum rate's (or its overall rate's)."""
    return relvar(b.v[sub], b.a[sub]) * one
