"""Parsimony of a finding: from the candidate the search picked to the region reported.

Regions hold a set of values per dimension. Three moves, under the search's current model:

- *up*: to a coarser region (one dimension dropped) that passes the search's criteria itself,
  unless the finding is significantly purer than the rest of it (one-sided at
  ``refine_alpha``) and that rest is not itself hot (``_anomalous``): report the coarsest cell
  unless a finer one is significantly purer (HotSpot's ripple effect: if the coarser cell is
  the cause, its parts deviate alike; where two causes overlap, their intersection is purer
  but each cause still covers the rest of its own region);
- *down*: to a finer region, one more dimension fixed to a value or, for an ordered dimension,
  to a range from either end (``kv_position >= 1024``, ``turn_position < 8``), or a sub-range of
  a range already fixed, when it is significantly purer than the rest of the region (one-sided
  at ``refine_alpha / k`` over the ``k`` finer regions examined), at least
  ``min_specificity`` times hotter, leaves out at least ``min_refine_share`` of the region's
  model mass, and the rest of the region is not itself hot
  (``_anomalous``: two overlapping causes make their intersection purer, but the rest of either
  still carries its cause: that is no reason to narrow either); of those, the purest that keeps ``refine_keep`` of the
  largest specific excess among them (a range that takes in healthy values is less pure, a
  part of the cause carries less); when none qualifies, the hottest set of values of a batch
  dimension (``SET_DIMS``: every third step), judged as a homogeneity test of all the values;
- *prune*: the coldest value of a dimension with several is dropped when it is
  ``min_specificity`` times colder than the rest of the region and either significantly so
  (one-sided at ``refine_alpha / k`` over the values tested), or not itself significantly
  hotter than everything outside the region (one-sided at ``keep_alpha``), or hot only by a
  few sequences: a range or set that took in values outside the cause gives them back;
- *widen*: sibling values of each fixed dimension whose regions are as specific (significant at
  ``refine_alpha / k``) and consistent with the finding (their log specificities within
  ``merge_z`` standard errors) join it: several steps, several KV bins of one fault; a value
  that joined so must still be supported on its own with the finding's final values.

The reported region must pass the search's criteria itself; otherwise the candidate stands.
*Up* and *down* take, of candidates equal within ``TIE``, the one on the fewest values
(:func:`first_of_largest`): aliases of the same tokens score alike up to the last bits.

Sums come from a region's own table (``localize.regions``): exact across values of sequence
dimensions, interpolated across values of token dimensions. A part of a region is tested
against the rest of the region as independent of it (conservative: a sequence's parts co-vary
positively); a region against the rest of the selection as ``localize.regions`` describes, plus
the baseline's share (its own region's contrast, times its shrinkage weight squared).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mismatchctl.stats.cube.cube import Field
from mismatchctl.stats.localize.math import chi2_sf, div, norm_ppf, own_var, relvar, weighted
from mismatchctl.stats.localize.regimes import (
    best_interval,
    best_period,
    filled,
    filled_all,
    is_regime,
    next_to,
    run_ends,
)
from mismatchctl.stats.localize.regions import (
    complement_var,
    log_contrast_var,
    region_moments,
    restrict,
)
from mismatchctl.stats.localize.screen import MARGIN, Screen, screen
from mismatchctl.stats.localize.search import (
    TIE,
    Search,
    Selected,
    effective_sequences,
    excess_lower_bound,
    log_z,
    specific_excess,
    specificity,
)
from mismatchctl.stats.localize.tables import Masks

MAX_ROUNDS = 4  # rounds of the parsimony moves
MAX_MOVES = 256  # moves of one kind in a round (pruning a range of blocked steps value by value)
# Batches: a fault can sit in any set of them (every third step, two gpus of four, some runs of a
# selection), where one of positions (KV, turn position, length, probability) sits in a range.
SET_DIMS = frozenset({"step", "gpu", "run"})


def _among(values: np.ndarray, offered: list[np.ndarray]) -> bool:
    return any(len(o) == len(values) and np.array_equal(o, values) for o in offered)


def _same_region(a: Masks, b: Masks) -> bool:
    return set(a) == set(b) and all(np.array_equal(a[d], b[d]) for d in a)


def first_of_largest(keys: list[float], values: list[int]) -> int:
    """The index of the candidate a move takes: of those within ``TIE`` (relative) of the
    largest key, the one on the fewest values (``values``: its dimensions' values), then the
    first. The same tokens seen through two dimensions (``turn 1`` and ``turn_kind later``)
    score alike up to the order their sums were added in; which name a move took must not
    follow those last bits (the finding's later moves and the model it explains away differ
    by dimension), and the coarser name is the simpler description."""
    top = max(keys)
    floor = top - abs(top) * TIE if math.isfinite(top) else top
    tied = [i for i, k in enumerate(keys) if k >= floor]
    return min(tied, key=lambda i: values[i])


@dataclass
class Stat:
    """Sums of one region: ``mom`` the cube fields, ``vsum``/``sdsum``/``cbar`` the
    interpolation of its own variance (``cbar`` None: exact), ``g`` its sequences (a lower
    bound across token values), ``m``/``f`` its model and predicted masses."""

    region: Masks
    mom: np.ndarray
    vsum: float
    sdsum: float
    cbar: float | None
    g: float
    m: float
    f: float
    cache: dict = field(default_factory=dict, repr=False)

    @property
    def a(self) -> float:
        return float(self.mom[Field.K3])

    @property
    def n(self) -> float:
        return float(self.mom[Field.TOKENS])

    def own(self) -> float:
        if self.cbar is None:
            return float(own_var(self.mom))
        return self.vsum + self.cbar * max(self.sdsum**2 - self.vsum, 0.0)


class Refiner:
    def __init__(self, search: Search) -> None:
        self.s = search
        self.t = search.t
        self.th = search.th
        self._along: dict[tuple, dict] = {}  # ``along``'s sums under the model's version
        self._along_version = search.version
        self._complements: dict[tuple, float] = {}  # ``_complement_var``'s, by region

    # --- sums ---------------------------------------------------------------------------

    def along(self, region: Masks, d: int) -> dict:
        """Per value of ``d``: the sums of the region with ``d`` fixed to that value (the
        region's other masks applied), from the table of the region's dimensions and ``d``
        (reused while the model and the other masks are the same: the moves ask for one
        column once per value or range of ``d`` they try)."""
        if self._along_version != self.s.version:
            self._along.clear()  # the model changed: every earlier column is stale
            self._along_version = self.s.version
        key = (d, *((e, region[e].tobytes()) for e in sorted(region) if e != d))
        col = self._along.get(key)
        if col is None:
            col = self._along[key] = self._column(region, d)
        return {**col, "region": region}

    def _complement_var(self, region: Masks) -> float:
        """``complement_var`` of a region, once per region: it reads only the cube's tables (no
        model), and every finer region a move tests against the rest of the selection asks for
        its parent's."""
        key = tuple((e, region[e].tobytes()) for e in sorted(region))
        found = self._complements.get(key)
        if found is None:
            found = self._complements[key] = complement_var(self.t, region)
        return found

    def _column(self, region: Masks, d: int) -> dict:
        """``along``'s sums: each array of the region's table with ``d`` taken at the values the
        region's other masks keep (the cells outside add nothing), summed over all but ``d``."""
        t, ref, s, spec = self.t, self.s.ref, self.s, self.t.spec
        dims = tuple(sorted({*region, d}))
        kept = [(i, np.flatnonzero(region[e])) for i, e in enumerate(dims) if e != d]

        def inside(x: np.ndarray) -> np.ndarray:
            for i, values in kept:
                if len(values) < x.shape[i]:
                    x = x.take(values, axis=i)
            return x

        k = dims.index(d)
        other = tuple(i for i in range(len(dims)) if i != k)
        tok = tuple(i for i in other if spec.is_token_dim(dims[i]))
        multi = [dims[i] for i in tok if np.count_nonzero(region[dims[i]]) > 1]
        m = inside(np.broadcast_to(s.model[dims], t.shape(dims)))
        f = m
        if s.e_tb is not None:  # the mass predicted at the baseline's rates
            f = inside(np.broadcast_to(s.e_tb[dims] * ref.q[dims], t.shape(dims)))
        g = inside(t.g[dims])
        g = g.max(axis=tok, keepdims=True, initial=0.0) if tok else g  # (the cells outside: 0)
        v = inside(t.v[dims])
        return {
            "region": region, "mom": inside(t.mom[dims]).sum(axis=other), "m": m.sum(axis=other),
            "f": f.sum(axis=other), "vsum": v.sum(axis=other), "sdsum": np.sqrt(v).sum(axis=other),
            "g": g.sum(axis=other), "cbar": max((t.cbar[e] for e in multi), default=None),
        }  # fmt: skip

    def combine(self, col: dict, d: int, values: np.ndarray) -> Stat:
        """The sums of the region with ``d`` fixed to a set of values."""
        token = self.t.spec.is_token_dim(d) and len(values) > 1
        cbar = col["cbar"]
        if token:
            cbar = max(cbar if cbar is not None else 0.0, self.t.cbar[d])
        region = {**col["region"], d: self._mask(d, values)}
        return Stat(
            region, col["mom"][values].sum(axis=0), float(col["vsum"][values].sum()),
            float(col["sdsum"][values].sum()), cbar,
            float(col["g"][values].max(initial=0.0) if token else col["g"][values].sum()),
            float(col["m"][values].sum()), float(col["f"][values].sum()),
        )  # fmt: skip

    def stat(self, region: Masks) -> Stat:
        d = next(iter(region))
        return self.combine(self.along(region, d), d, np.flatnonzero(region[d]))

    # --- tests --------------------------------------------------------------------------

    def baseline_parts(self, st: Stat) -> tuple[float, float, bool]:
        """The baseline's shares of the variances of log S and of the log rate ratio, and
        whether its region has ``min_sequences``."""
        if "b" not in st.cache:
            st.cache["b"] = self._baseline_parts(st.region)
        return st.cache["b"]

    def _baseline_parts(self, region: Masks) -> tuple[float, float, bool]:
        base = self.s.baseline
        if base is None:
            return 0.0, 0.0, True
        shared = restrict(region, base.compared)
        rm = region_moments(base.b, shared)
        q_var = relvar(rm.own(), float(rm.mom[Field.K3]))
        if not any(d != self.s.stratum for d in shared):
            return 0.0, float(q_var), True
        w = float(self.s.ref.weight(tuple(shared), q_var))
        b_var = float(weighted(w, log_contrast_var(base.b, shared)))
        return b_var, float(weighted(w, q_var)), rm.g >= self.th.min_sequences

    def global_s(self, st: Stat) -> tuple[float, float]:
        """S of a region against the rest of the selection and the variance of log S."""
        if "s" not in st.cache:
            m_all = float(self.s.model[tuple(sorted(st.region))].sum())
            s = float(specificity(np.array(st.a), st.m, self.t.total_a, m_all))
            var = log_contrast_var(self.t, st.region) + self.baseline_parts(st)[0]
            st.cache["s"] = (s, var)
        return st.cache["s"]

    def within(self, part: Stat, rest: Stat, with_baseline: bool, spec_min: bool = True) -> float:
        """z of a part of a region against the rest of the region (independent parts); -1
        when the part is not ``min_specificity`` times hotter (unless ``spec_min`` is off)."""
        s = self._ratio(part, rest)
        var = float(relvar(part.own(), part.a) + relvar(rest.own(), rest.a))
        if with_baseline:  # both parts' baseline contrasts: conservative
            var += self.baseline_parts(part)[0] + self.baseline_parts(rest)[0]
        if spec_min and not s >= self.th.min_specificity:
            return -1.0
        return float(log_z(np.array(s), np.array(var)))

    def supported(self, st: Stat, rest_n: float) -> bool:
        th = self.th
        return (
            st.n >= th.min_tokens
            and st.g >= th.min_sequences
            and rest_n >= th.min_tokens
            and self.baseline_parts(st)[2]
            and float(effective_sequences(st.mom)) >= th.min_effective_sequences
            and st.n <= th.max_token_share * self.t.total_n
        )

    def passes(self, st: Stat) -> tuple[bool, float]:
        """Whether a region passes the search's criteria, and its specific excess."""
        s, var = self.global_s(st)
        ok = self.supported(st, self.t.total_n - st.n) and bool(self.s.significant(st.a, s, var))
        if ok and self.s.e_tb is not None:
            qv = float(relvar(st.own(), st.a)) + self.baseline_parts(st)[1]
            ok = bool(excess_lower_bound(np.array(st.a), st.f, qv, self.s.z_ci))
        return ok, float(specific_excess(np.array(st.a), s))

    # --- moves --------------------------------------------------------------------------

    def parsimonious(self, start: Masks) -> Selected:
        """The moves in turn (up, down, prune, widen) until none applies (a bounded number of
        rounds): widening a finding can make a refinement significant, and the reverse."""
        region = start
        self._widened: set[tuple[int, int]] = set()
        for _ in range(MAX_ROUNDS):
            before = region
            for move in (self._up, self._down, self._prune):
                for _ in range(MAX_MOVES):
                    moved = move(region)
                    if moved is None:
                        break
                    region = moved
            region = self._drop_full(self._widen(self._drop_full(region)))
            if _same_region(region, before):
                break
        region = self._drop_full(self._recheck_widened(region))
        st = self.stat(region)
        if not self.passes(st)[0]:
            region, st = start, self.stat(start)
        s, var = self.global_s(st)
        return Selected(region, s, float(log_z(np.array(s), np.array(var))))

    def _drop_full(self, region: Masks) -> Masks:
        """Dimensions whose values cover every value the target has constrain nothing."""
        present = {d: self.t.n[(d,)] > 0 for d in region}
        kept = {d: m for d, m in region.items() if not np.all(m[present[d]])}
        return kept if kept else region

    def _trivial(self, region: Masks) -> bool:
        return not any(d != self.s.stratum for d in region)

    def _split(self, region: Masks, d: int, values: np.ndarray) -> tuple[Stat, Stat] | None:
        """The region with ``d`` in ``values``, and the rest of the region (the values ``d``
        allowed before, or all it has, outside ``values``)."""
        col = self.along(region, d)
        allowed = region[d] if d in region else np.ones(self.t.spec.levels(d), bool)
        rest = np.flatnonzero(allowed & ~self._mask(d, values) & (col["mom"][:, 0] > 0))
        if not len(rest):
            return None
        return self.combine(col, d, values), self.combine(col, d, rest)

    def _up(self, region: Masks) -> Masks | None:
        z_refine = norm_ppf(1.0 - self.th.refine_alpha)
        found: list[tuple[float, Masks]] = []  # (specific excess, coarser region) that qualify
        for d in region:
            parent = {e: m for e, m in region.items() if e != d}
            if self._trivial(parent) or not self.t.has(tuple(parent)):
                continue
            ok, lam = self.passes(self.stat(parent))
            split = self._split(parent, d, np.flatnonzero(region[d])) if ok else None
            if split is None:
                continue
            purer = self.within(*split, with_baseline=True) >= z_refine
            if not purer or self._anomalous(split[1], parent, z_refine):
                found.append((lam, parent))
        if not found:
            return None
        return found[
            first_of_largest([lam for lam, _ in found], [self._size(r) for _, r in found])
        ][1]

    def _down(self, region: Masks) -> Masks | None:
        """The finer region, from the single values and ranges of :func:`_subsets`; when none
        is purer, from the hot sets of batch dimensions (:func:`_hot_values`), judged with the
        values and ranges in the count of the finer regions examined. The values and ranges
        are screened all at once (``localize.screen``); those that may pass are tested one by
        one.

        A dimension the region fixes already is refined to a sub-range only when it is a
        regime dimension (``localize.regimes``: the steps of a long run, whose change points
        are found one move at a time). For the others this move never looked at them (the
        table of the region and the dimension was asked for with the dimension twice); doing
        so changes the sample runs' findings, so it waits for a deliberate change."""
        screens: list[tuple[int, list[np.ndarray], Screen]] = []
        cols: dict[int, dict] = {}
        for d in range(len(self.t.spec.dims)):
            if d in region and not is_regime(self.t, d, self.th):
                continue  # (a sub-range of a fixed dimension: a regime's only, note below)
            if not self.t.has(tuple({*region, d})):
                continue
            cols[d] = col = self.along(region, d)
            subsets = self._subsets(region, d, col)
            if subsets:
                screens.append((d, subsets, screen(self, region, d, col, subsets)))
        k = sum(int(sc.counted.sum()) for _, _, sc in screens)
        plain: list[tuple[float, int, Stat, Stat]] = []  # z, its degrees of freedom, the split
        if k:
            z_refine = norm_ppf(1.0 - self.th.refine_alpha / k) - MARGIN
            for d, subsets, sc in screens:
                for i in np.flatnonzero(sc.counted & (sc.z >= z_refine)):
                    plain += self._candidate(region, d, subsets[i], 1)
        moved = self._purest(region, plain, k)
        if moved is not None:
            return moved
        hot, examined = [], 0
        for d, col in cols.items():
            for values, df, count in self._hot_values(region, d, col):
                found = self._candidate(region, d, values, df)
                hot += found
                examined += count * len(found)  # a scan's best stands for every region scanned
        return self._purest(region, hot, k + examined)

    def _candidate(
        self, region: Masks, d: int, values: np.ndarray, df: int
    ) -> list[tuple[float, int, Stat, Stat]]:
        split = self._split(region, d, values)
        if split is None or not self.supported(split[0], split[1].n):
            return []
        if split[1].m < self.th.min_refine_share * (split[0].m + split[1].m):
            return []  # shaving a sliver off is no simpler explanation
        return [(self.within(*split, with_baseline=False), df, *split)]

    def _purest(
        self, region: Masks, found: list[tuple[float, int, Stat, Stat]], k: int
    ) -> Masks | None:
        """Of the finer regions ``found`` (``k`` examined in all), those significantly purer than
        the rest of the region whose rest is not itself hot; the purest of those carrying
        ``refine_keep`` of the largest specific excess among them."""
        if not found:
            return None
        alpha = self.th.refine_alpha / k
        z_refine = norm_ppf(1.0 - alpha)

        def purer_at(z: float, df: int) -> bool:
            # a set picked by its values' rates: its contrast with the rest is at most the
            # homogeneity statistic of all the values, chi-square with k - 1 degrees of freedom
            return z >= z_refine if df == 1 else z > 0 and chi2_sf(z * z, df) <= alpha

        purer = []
        for z, df, part, rest in found:
            if not purer_at(z, df):
                continue
            if not purer_at(self.within(part, rest, with_baseline=True), df):
                continue
            if self._anomalous(rest, region, z_refine):
                continue  # the rest carries excess too: the cause is not (only) in the part
            s = self.global_s(part)[0]
            lam = float(specific_excess(np.array(part.a), s))
            if lam > 0:
                purer.append((s, lam, part.region))
        if not purer:
            return None
        keep = self.th.refine_keep * max(lam for _, lam, _ in purer)
        kept = [p for p in purer if p[1] >= keep]
        return kept[first_of_largest([s for s, _, _ in kept], [self._size(r) for *_, r in kept])][2]

    def _anomalous(self, rest: Stat, parent: Masks, z_refine: float) -> bool:
        """Whether the rest of a region is itself hot: significantly hotter (by at least
        ``min_specificity``), under the current model (the causes found so far explained
        away), than everything outside the region. A rest that still carries a cause is no
        reason to narrow a finding to its other part; a uniform excess over both (a policy)
        does not count."""
        th = self.th
        if rest.n < th.min_tokens or rest.g < th.min_sequences:
            return False
        # the parent's sums from the rest's own table: one table's model throughout
        table = tuple(sorted(rest.region))
        d = next(e for e in table if e not in parent or e == table[-1])
        col = self.along(parent, d)
        allowed = parent[d] if d in parent else np.ones(self.t.spec.levels(d), bool)
        p0 = self.combine(col, d, np.flatnonzero(allowed))
        out_a, out_m = self.t.total_a - p0.a, float(self.s.model[table].sum()) - p0.m
        s = float(div(div(rest.a, rest.m, np.nan), div(out_a, out_m, np.nan), np.nan))
        var = float(relvar(rest.own(), rest.a) + relvar(self._complement_var(parent), out_a))
        z = float(log_z(np.array(s), np.array(var)))
        return s >= th.min_specificity and z >= z_refine

    def _prune(self, region: Masks) -> Masks | None:
        """Drop the coldest value of a dimension with several when it is not part of the cause:
        at least ``min_specificity`` times colder than the rest of the region, and either
        significantly so (one-sided at ``refine_alpha / k`` over the ``k`` values tested), or
        not itself significantly hotter than everything outside the region (one-sided at
        ``keep_alpha``), or hot only by a few sequences (fewer than
        ``min_effective_sequences``) and not hotter than outside at the stricter
        ``refine_alpha / k``: a faulty step whose excess sits in a few long sequences stays)."""
        tests = []
        for d, mask in region.items():
            values = np.flatnonzero(mask)
            if len(values) < 2:
                continue
            if is_regime(self.t, d, self.th):
                values = run_ends(mask)  # a regime's ranges are trimmed, never holed
            for v in values:
                split = self._split(region, d, np.array([v]))
                if split is not None and split[0].n > 0 and split[1].n > 0:
                    tests.append((self._ratio(*split), d, int(v), split))
        if not tests:
            return None
        z_prune = norm_ppf(1.0 - self.th.refine_alpha / len(tests))
        z_keep = norm_ppf(1.0 - self.th.keep_alpha)
        for ratio, d, v, (part, rest) in sorted(tests, key=lambda x: x[0]):
            if not ratio <= 1.0 / self.th.min_specificity:
                break
            colder = self.within(rest, part, with_baseline=True, spec_min=False) >= z_prune
            hot = self._hot_outside(part, region)
            few = float(effective_sequences(part.mom)) < self.th.min_effective_sequences
            if colder or hot < z_keep or (few and hot < z_prune):
                mask = region[d].copy()
                mask[v] = False
                return {**region, d: mask}
        return None

    @staticmethod
    def _ratio(part: Stat, rest: Stat) -> float:
        """A part's rate relative to the model, over the rest of its region's."""
        return float(div(div(part.a, part.m, np.nan), div(rest.a, rest.m, np.nan), np.nan))

    def _hot_outside(self, part: Stat, region: Masks) -> float:
        """z of a part of a region being hotter than everything outside the region."""
        table = tuple(sorted(region))
        outer = self.stat(region)
        out_a = self.t.total_a - outer.a
        out_m = float(self.s.model[table].sum()) - outer.m
        s = float(div(div(part.a, part.m, np.nan), div(out_a, out_m, np.nan), np.nan))
        var = float(relvar(part.own(), part.a) + relvar(self._complement_var(region), out_a))
        var += self.baseline_parts(part)[0]
        return float(log_z(np.array(s), np.array(var)))

    def _subsets(self, region: Masks, d: int, col: dict) -> list[np.ndarray]:
        """Single values, and ranges from either end for an ordered dimension (within the
        values already fixed, when ``d`` is)."""
        if d in region:
            allowed = np.flatnonzero(region[d])
            if len(allowed) < 2:
                return []
        else:
            allowed = np.flatnonzero(col["mom"][:, 0] > 0)
        out = [np.array([v]) for v in allowed]
        if self.t.spec.dims[d].ordered and d != self.s.stratum and len(allowed) > 2:
            out += [allowed[: j + 1] for j in range(1, len(allowed) - 1)]
            out += [allowed[j:] for j in range(1, len(allowed) - 1)]
        if is_regime(self.t, d, self.th):  # a regime's range spans the steps without tokens here
            within = region[d] if d in region else np.ones(self.t.spec.levels(d), bool)
            out = filled_all(out, within)
        return out

    def _hot_values(self, region: Masks, d: int, col: dict) -> list[tuple[np.ndarray, int, int]]:
        """The values of a batch dimension (``SET_DIMS``) hotter than the others, when they are
        no single value or range :func:`_subsets` offers: of the splits of the values ranked by
        their rates (K3 over the model's expectation), the one whose two sides differ most (the
        faulty steps of a fault in every third step). Returned with ``k - 1`` degrees of
        freedom (``k`` values): the split was chosen by the data, so it is judged as the
        homogeneity test of all ``k``. The set leaves out at least two values (all but one is
        that one being cold: pruning's business), so a dimension needs four. A regime
        dimension (``localize.regimes``: the steps of a long run) offers its best interval and
        its best every-k-th values instead, each standing for the regions scanned (the third
        element: how many regions the candidate counts for)."""
        if self.t.spec.dims[d].name not in SET_DIMS:
            return []
        allowed = region[d] if d in region else np.ones(self.t.spec.levels(d), bool)
        values = np.flatnonzero(allowed & (col["mom"][:, Field.TOKENS] > 0))
        k = len(values)
        if k < 4:
            return []
        offered = self._subsets(region, d, col)
        if is_regime(self.t, d, self.th):
            found = self._regimes(region, d, values, col)
            return [(v, 1, n) for v, n in found if not _among(v, offered)]
        mom, m = col["mom"][values], col["m"][values]
        ranked = np.argsort(-div(mom[:, Field.K3], m, 0.0), kind="stable")
        head_mom, head_m = np.cumsum(mom[ranked], axis=0)[:-1], np.cumsum(m[ranked])[:-1]
        tail_mom, tail_m = mom.sum(axis=0) - head_mom, m.sum() - head_m
        with np.errstate(divide="ignore", invalid="ignore"):
            s = div(div(head_mom[:, Field.K3], head_m, np.nan), div(
                tail_mom[:, Field.K3], tail_m, np.nan), np.nan)  # fmt: skip
            var = relvar(own_var(head_mom), head_mom[:, Field.K3])
            var = var + relvar(own_var(tail_mom), tail_mom[:, Field.K3])
            z = log_z(s, var)
        if not np.any(np.isfinite(z)):
            return []
        hot = np.sort(values[ranked[: int(np.argmax(z)) + 1]])
        if len(hot) > k - 2:
            return []  # all values but one: that one is cold (pruning's business), none is hot
        if _among(hot, offered):
            return []  # a single value or a range: tried as such
        return [(hot, k - 1, 1)]

    def _regimes(
        self, region: Masks, d: int, values: np.ndarray, col: dict
    ) -> list[tuple[np.ndarray, int]]:
        """A regime dimension's best interval and, when its values are not in blocks (which
        mix the phases of a period), its best every-k-th values."""
        mom, m = col["mom"][values], col["m"][values]
        within = region[d] if d in region else np.ones(self.t.spec.levels(d), bool)
        found = []
        interval = best_interval(values, mom, m, self.th)
        if interval is not None:
            found.append((filled(interval[0], within), interval[1]))
        period = None if self.t.spec.blocked(d) else best_period(values, mom, m, self.th)
        return found if period is None else [*found, period]

    def _size(self, region: Masks) -> int:
        """How many values the region's dimensions have (the coarser name of equal tokens)."""
        return sum(self.t.spec.levels(d) for d in region)

    def _mask(self, d: int, values: np.ndarray) -> np.ndarray:
        mask = np.zeros(self.t.spec.levels(d), bool)
        mask[values] = True
        return mask

    def _recheck_widened(self, region: Masks) -> Masks:
        """Values that joined by widening, when the finding's other values were different, must
        still be supported on their own with the final ones (a block of steps whose mass at
        the final KV positions is one sequence's goes)."""
        for d, v in sorted(self._widened):
            if d not in region or not region[d][v] or np.count_nonzero(region[d]) < 2:
                continue
            split = self._split(region, d, np.array([v]))
            if split is not None and not self.supported(split[0], split[1].n):
                region = {**region, d: region[d] & ~self._mask(d, np.array([v]))}
        return region

    def _widen(self, region: Masks) -> Masks:
        s_r, var_r = self.global_s(self.stat(region))
        if not (s_r > 0 and math.isfinite(var_r)):
            return region
        trials = []
        for d in list(region):
            col = self.along(region, d)
            regime = is_regime(self.t, d, self.th)
            for v in np.flatnonzero((col["mom"][:, 0] > 0) & ~region[d]):
                if regime and not next_to(region[d], int(v)):
                    continue  # a regime's ranges grow at their ends
                st = self.combine(col, d, np.array([v]))
                if self.supported(st, self.t.total_n - st.n):
                    trials.append((d, int(v), st))
        if not trials:
            return region
        z_w = norm_ppf(1.0 - self.th.refine_alpha / len(trials))
        grown = {d: m.copy() for d, m in region.items()}
        for d, v, st in trials:
            s, var = self.global_s(st)
            if not (s >= self.th.min_specificity and math.isfinite(var)):
                continue
            z = float(log_z(np.array(s), np.array(var)))
            close = abs(math.log(s) - math.log(s_r)) <= self.th.merge_z * math.sqrt(var + var_r)
            if z >= z_w and close:
                grown[d][v] = True
                self._widened.add((d, v))
        return grown
