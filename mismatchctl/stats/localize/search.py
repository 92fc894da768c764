"""The greedy search for localized causes over every cell of the cube (docs/explain.md).

The target's *model* mass ``M(c) = E_T(c) beta(c)`` is what a cell would hold at the target's
own per-stratum rates if it were as much hotter than the rest of the selection as the
baseline's same cell is (``beta``: ``localize.reference``; 1 without a baseline). A region's
*specificity*

    S(R) = (A(R) / M(R)) / ((A - A(R)) / (M - M(R)))

is how much hotter than the rest of the selection it is beyond that, like for like (the model
carries the token mix). ``M`` is the total of the region's own table: each table's model is
additive over its cells, but the baseline's contrasts differ between tables, so tables'
totals differ slightly and a region is only ever compared within its table; its *specific excess* ``A(R) (1 - 1/S)`` the mass the localized cause
adds. The candidates are every cell of every table and, for each ordered dimension (not the
stratum), every range of its values from either end (``kv_position >= 1024``). Each round
takes the passing candidate with the largest specific excess, makes it parsimonious
(``localize.refine``), and explains it away: every cell's model mass grows by ``(S - 1)`` times
its overlap with the finding (HotSpot's ripple effect), so the finding and what it implies for
coarser and overlapping cells are no longer excess, and the next round finds the next cause.

The variance of ``log S`` (delta method, sequences as clusters) is exact for a cell and for a
range of a sequence dimension (``localize.math.contrast_var``: the cube's cross moments give
the covariance of the region and its rest); for a range of a token dimension, whose values
share sequences, the range's and the rest's variances come by pieces (``localize.pieces``),
taken as independent (conservative); plus the baseline's share (its own region's contrast,
times the square of its shrinkage weight).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from mismatchctl.stats.cube.cube import Field
from mismatchctl.stats.localize.math import (
    contrast_var,
    div,
    norm_ppf,
    own_var,
    relvar,
    weighted,
)
from mismatchctl.stats.localize.model import LazyModel
from mismatchctl.stats.localize.pieces import accumulate, token_range_vars
from mismatchctl.stats.localize.reference import Reference
from mismatchctl.stats.localize.tables import Dims, Masks, SideTables
from mismatchctl.stats.localize.thresholds import LocalizeThresholds

# Regions whose specific excess differs by less than this (relative) are equals: the same
# tokens seen through two dimensions (turn 1+ and turn_kind later) have the same excess up to
# the order their sums were added in, and the first in the order of the views wins either way.
TIE = 1e-9


@dataclass
class Selected:
    """One region picked by the search, with its specificity and z when it was picked."""

    region: Masks
    specificity: float
    z: float


class View(NamedTuple):
    """Sums of the candidate regions of one table: its cells, or for an ordered dimension its
    ranges from either end (``axis``: that dimension's axis; ``kind``: "le" or "ge").

    ``mom``: the cube fields summed over the region's cells; ``f``: its mass predicted at the
    baseline's rates (None without a baseline: only the excess over the baseline reads it; the
    model mass changes every round: the rounds sum it along the ranges); ``bvar``/``qvar``:
    the baseline's shares of the variances of log S and of the log rate ratio; ``bok``: the
    baseline's region has ``min_sequences``."""

    dims: Dims
    axis: int | None
    kind: str | None
    mom: np.ndarray
    f: np.ndarray | None
    bvar: np.ndarray
    qvar: np.ndarray
    bok: np.ndarray
    valid: np.ndarray

    @property
    def a(self) -> np.ndarray:
        return self.mom[..., Field.K3]

    @property
    def n(self) -> np.ndarray:
        return self.mom[..., Field.TOKENS]

    @property
    def g(self) -> np.ndarray:
        return self.mom[..., Field.SEQS]


@dataclass
class Baseline:
    """What the search needs of the baseline beyond ``Reference``: its tables and the shared
    dimensions."""

    b: SideTables
    compared: frozenset[int]


class Search:
    """State of the search over one target (and its reference)."""

    def __init__(
        self,
        t: SideTables,
        e_t: dict[Dims, np.ndarray],
        ref: Reference,
        stratum: int | None,
        candidates: list[Dims],
        th: LocalizeThresholds,
        e_tb: dict[Dims, np.ndarray] | None = None,
        baseline: Baseline | None = None,
    ) -> None:
        """``e_t``: the target's expected mass at its own stratum rates; ``e_tb``: at the
        baseline's; ``baseline``: its tables (both None without a baseline)."""
        self.t, self.ref, self.stratum, self.th, self.e_tb = t, ref, stratum, th, e_tb
        self.baseline = baseline
        start = {d: _scaled(e_t[d] * ref.beta[d], float(e_t[()])) for d in t.tables}
        self.model = LazyModel(t, start)
        self.candidates = candidates
        self.z_ci = norm_ppf(0.5 + th.rate_ci_level / 2)
        self.tested = 0
        self.eligible = [e for v in self.views() if (e := self._eligible(v)) is not None]
        # every eligible region's mass and variance of log S, in the order of the views
        # (neither depends on the model: one array for every round of ``best_region``)
        self._a = np.concatenate([e.a for e in self.eligible]) if self.eligible else np.zeros(0)
        self._var = np.concatenate([e.var for e in self.eligible]) if self.eligible else self._a
        self._offsets = np.r_[0, np.cumsum([len(e.idx) for e in self.eligible])].astype(int)
        self.z_family = norm_ppf(1.0 - th.family_alpha / max(self.tested, 1))

    @property
    def version(self) -> int:
        """Of the model: sums read under it may be reused until it changes."""
        return self.model.version

    def _eligible(self, view: View) -> Eligible | None:
        """The supported regions of a view whose excess over the baseline is significant, with
        the variance of their log specificity (both independent of the model, so computed
        once); counts the supported ones in ``tested``."""
        ok = self._supported(view)
        self.tested += int(ok.sum())
        a = view.a
        if view.f is not None and ok.any():  # with a baseline
            qvar = relvar(self._own(view), a) + view.qvar
            ok &= excess_lower_bound(a, view.f, qvar, self.z_ci)
        idx = np.flatnonzero(ok)
        if not len(idx):
            return None
        var = self._t_var(view, ok).ravel()[idx] + np.broadcast_to(view.bvar, ok.shape).ravel()[idx]
        return Eligible(view.dims, view.axis, view.kind, idx, a.ravel()[idx], var)

    def _own(self, view: View) -> np.ndarray:
        """Variance of the regions' own masses."""
        if view.axis is not None and self.t.spec.is_token_dim(view.dims[view.axis]):
            return token_range_vars(self.t, view.dims, view.axis, view.kind)[0]
        return own_var(view.mom)

    def _t_var(self, view: View, ok: np.ndarray) -> np.ndarray:
        """The target's share of the variance of log S (only where ``ok``)."""
        if view.axis is not None and self.t.spec.is_token_dim(view.dims[view.axis]):
            own, rest = token_range_vars(self.t, view.dims, view.axis, view.kind)
            return relvar(own, view.a) + relvar(rest, self.t.total_a - view.a)
        mom = view.mom.reshape(-1, view.mom.shape[-1])
        out = np.full(mom.shape[0], np.inf)
        flat = ok.ravel()
        out[flat] = contrast_var(mom[flat], self.t.total)
        return out.reshape(ok.shape)

    def views(self) -> Iterator[View]:
        """Every candidate table's cells, and its ranges along each ordered dimension (not the
        stratum) of at least three values."""
        spec = self.t.spec
        for dims in self.candidates:
            base = self._base(dims)
            yield base
            for k, d in enumerate(dims):
                if d != self.stratum and spec.dims[d].ordered and spec.levels(d) > 2:
                    yield self._ranged(base, k, "le")
                    yield self._ranged(base, k, "ge")

    def _base(self, dims: Dims) -> View:
        t, ref, shape = self.t, self.ref, self.t.shape(dims)
        f = None if self.e_tb is None else np.broadcast_to(self.e_tb[dims] * ref.q[dims], shape)
        bok = np.broadcast_to(ref.supported[dims], shape)
        return View(
            dims, None, None, t.mom[dims], f, np.broadcast_to(ref.beta_var[dims], shape),
            np.broadcast_to(ref.q_var[dims], shape), bok, np.ones(shape, bool),
        )  # fmt: skip

    def _ranged(self, base: View, k: int, kind: str) -> View:
        """The view of the ranges of axis ``k`` from its start (``le``: values <= j) or its end
        (``ge``: values >= j); ranges of one value or of all are not candidates (the cells and
        the whole are). Along a sequence dimension every moment adds (disjoint sequences)."""

        def acc(x: np.ndarray) -> np.ndarray:
            return accumulate(np.broadcast_to(x, shape + np.shape(x)[len(shape) :]), k, kind)

        shape = base.mom.shape[:-1]
        j = np.arange(shape[k]).reshape([-1 if i == k else 1 for i in range(len(shape))])
        valid = np.broadcast_to((j >= 1) & (j <= shape[k] - 2), shape)
        bvar, qvar, bok = self._baseline_vars(base.dims, k, kind)
        mom = acc(base.mom)
        if self.t.spec.is_token_dim(base.dims[k]):  # sequences: a lower bound, the largest value's
            mom[..., Field.SEQS] = accumulate(
                np.broadcast_to(base.g, shape), k, kind, np.maximum.accumulate
            )
        f = None if base.f is None else acc(base.f)
        return View(base.dims, k, kind, mom, f, bvar, qvar, bok, valid)

    def _baseline_vars(
        self, dims: Dims, k: int, kind: str
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The baseline's variance shares for ranges along axis ``k``, from its own region on
        the shared dimensions (shrinkage weight squared): exact for a sequence dimension's
        ranges, by pieces (``localize.pieces``) for a token dimension's; and whether that
        region has ``min_sequences`` (a lower bound across token values)."""
        shape = self.t.shape(dims)
        if self.baseline is None:
            return np.zeros(shape), np.zeros(shape), np.ones(shape, bool)
        b, compared = self.baseline.b, self.baseline.compared
        sub = tuple(d for d in dims if d in compared)
        lifted = b.mom[sub].reshape([b.spec.levels(d) if d in sub else 1 for d in dims] + [-1])
        ranged = dims[k] in sub
        mom = accumulate(lifted, k, kind) if ranged else lifted
        g = lifted[..., Field.SEQS]
        if ranged and b.spec.is_token_dim(dims[k]):
            g = accumulate(g, k, kind, np.maximum.accumulate)
        elif ranged:
            g = mom[..., Field.SEQS]
        bok = np.broadcast_to(g >= self.th.min_sequences, shape)
        a = mom[..., Field.K3]
        trivial = not any(d != self.stratum for d in sub)
        if ranged and b.spec.is_token_dim(dims[k]):
            own, rest = token_range_vars(b, sub, sub.index(dims[k]), kind)
            own, rest = (self.t.lift(x, sub, dims) for x in (own, rest))
            contrast = relvar(own, a) + relvar(rest, b.total_a - a)
        else:
            own, contrast = own_var(mom), contrast_var(mom, b.total)
        w = np.ones(shape) if trivial else self.ref.weight(sub, relvar(own, a))
        qvar = np.broadcast_to(weighted(w, relvar(own, a)), shape)
        if trivial:
            return np.zeros(shape), qvar, np.ones(shape, bool)
        return np.broadcast_to(weighted(w, contrast), shape), qvar, bok

    def _supported(self, view: View) -> np.ndarray:
        th = self.th
        n = view.n
        ok = view.valid & (n >= th.min_tokens) & (view.g >= th.min_sequences)
        ok &= effective_sequences(view.mom) >= th.min_effective_sequences
        ok &= n <= th.max_token_share * self.t.total_n
        return ok & (self.t.total_n - n >= th.min_tokens) & view.bok

    def evaluate(self, e: Eligible) -> tuple[np.ndarray, np.ndarray]:
        """(passes, specific excess) of the eligible regions of a view, under the current
        model."""
        m = self.model[e.dims]
        total = float(m.sum())
        m = np.broadcast_to(m, self.t.shape(e.dims))
        if e.axis is not None:
            m = accumulate(m, e.axis, e.kind)
        s = specificity(e.a, m.ravel()[e.idx], self.t.total_a, total)
        ok = self.significant(e.a, s, e.var)
        return ok, np.where(ok, specific_excess(e.a, s), 0.0)

    def significant(self, a: np.ndarray, s: np.ndarray, var: np.ndarray) -> np.ndarray:
        """Specific (``min_specificity``), significant at the family level, and carrying."""
        ok = (s >= self.th.min_specificity) & (log_z(s, var) >= self.z_family)
        return ok & (specific_excess(a, s) >= self.th.min_specific_share * self.t.total_a)

    def best_region(self) -> Masks | None:
        """The passing region (cell or range) with the largest specific excess (the first of
        equals, in the order of the views), or None. The eligible regions of every view are
        tested at once (:meth:`evaluate`'s formulas on one array: hundreds of views, ten
        rounds)."""
        if not self.eligible:
            return None
        m = np.concatenate([self._model_of(e) for e in self.eligible])
        table_total = {d: float(self.model[d].sum()) for d in {e.dims for e in self.eligible}}
        totals = np.repeat([table_total[e.dims] for e in self.eligible], np.diff(self._offsets))
        a, var = self._a, self._var
        s = specificity(a, m, self.t.total_a, totals)
        ok = self.significant(a, s, var)
        if not ok.any():
            return None
        lam = np.where(ok, specific_excess(a, s), 0.0)
        k = int(np.argmax(lam >= lam.max() * (1.0 - TIE)))  # the first of equals (``TIE``)
        which = int(np.searchsorted(self._offsets, k, side="right")) - 1
        e = self.eligible[which]
        flat = int(e.idx[k - self._offsets[which]])
        idx = tuple(int(i) for i in np.unravel_index(flat, self.t.shape(e.dims)))
        return view_masks(self.t, e, idx)

    def _model_of(self, e: Eligible) -> np.ndarray:
        """The model mass of each eligible region of a view, under the current model."""
        m = np.broadcast_to(self.model[e.dims], self.t.shape(e.dims))
        if e.axis is not None:
            m = accumulate(m, e.axis, e.kind)
        return m.ravel()[e.idx]

    def explain_away(self, sel: Selected, factor: float | None = None) -> None:
        """Every table's model mass grows by ``factor - 1`` (default: the finding's S) times
        its overlap with the finding; ``1 / S`` undoes it (the growth is multiplicative on the
        finding's cells). Each table grows when it is next read (``localize.model``)."""
        self.model.explain_away(sel.region, sel.specificity if factor is None else factor)


class Eligible(NamedTuple):
    """The eligible regions of one view: flat indices into its table, masses, and the variance
    of their log specificity."""

    dims: Dims
    axis: int | None
    kind: str | None
    idx: np.ndarray
    a: np.ndarray
    var: np.ndarray


def view_masks(t: SideTables, view: View | Eligible, idx: tuple[int, ...]) -> Masks:
    """The region of one element of a view."""
    out: Masks = {}
    for k, (d, v) in enumerate(zip(view.dims, idx, strict=True)):
        levels = np.arange(t.spec.levels(d))
        if k == view.axis:
            out[d] = levels <= v if view.kind == "le" else levels >= v
        else:
            out[d] = levels == v
    return out


def effective_sequences(mom: np.ndarray) -> np.ndarray:
    """``A^2 / sum_i y_i^2``: how many sequences' worth of the mass there is (the sum of the
    cells' own squares across token values, which can only overstate it)."""
    return div(mom[..., Field.K3] ** 2, mom[..., Field.YY])


def _scaled(m: np.ndarray, total: float) -> np.ndarray:
    """A table's model rescaled to the selection's expected total: the baseline's contrasts
    differ between tables, and comparisons across tables (a region's part and the rest of the
    selection) must not see that as excess."""
    s = float(np.sum(m))
    return m * (total / s) if s > 0 else np.asarray(m, np.float64)


def specificity(
    a: np.ndarray, m: np.ndarray, a_all: float | np.ndarray, m_all: float | np.ndarray
) -> np.ndarray:
    """``(a / m) / ((a_all - a) / (m_all - m))``; NaN when the rest is empty."""
    rest_a, rest_m = a_all - a, m_all - m
    s = div(div(a, m, np.nan), div(rest_a, rest_m, np.nan), np.nan)
    return np.where((rest_a > 0) & (rest_m > 0), s, np.nan)


def log_z(s: np.ndarray, var: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.log(s) / np.sqrt(var)
    return np.where(np.isfinite(z), z, -np.inf)


def specific_excess(a: np.ndarray, s: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s > 1, a * (1.0 - 1.0 / s), 0.0)


def excess_lower_bound(a: np.ndarray, f: np.ndarray, var: np.ndarray, z: float) -> np.ndarray:
    """``log(a / f) - z sd > 0``: the rate ratio's interval lies above 1."""
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.log(div(a, f, np.nan)) - z * np.sqrt(var)
    return np.where(np.isfinite(low), low > 0, False)
