"""From the cells the search picked to reported findings: sibling merges, the estimates of each
region (``localize.estimates``, sums from the cube), delta-method intervals and sentences."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mismatchctl.stats.cube.cube import Field
from mismatchctl.stats.cube.spec import CubeSpec
from mismatchctl.stats.localize.estimates import (
    Estimate,
    expected,
    rates,
    versus_baseline,
    versus_rest,
)
from mismatchctl.stats.localize.math import div, norm_ppf, relvar, weighted
from mismatchctl.stats.localize.reference import Reference
from mismatchctl.stats.localize.regimes import is_regime, readable
from mismatchctl.stats.localize.regions import (
    log_contrast_var,
    region_moments,
    region_sums,
    restrict,
)
from mismatchctl.stats.localize.result import (
    BASELINE,
    INTERNAL,
    BaselineRegions,
    Finding,
    Region,
    sentence,
)
from mismatchctl.stats.localize.search import Selected, effective_sequences
from mismatchctl.stats.localize.tables import Masks, SideTables, on_parents
from mismatchctl.stats.localize.thresholds import LocalizeThresholds
from mismatchctl.stats.value_names import name_values


@dataclass
class Sides:
    """What the estimates of a region need: both sides' tables and the search's settings."""

    t: SideTables
    b: SideTables | None
    stratum: int | None
    compared: frozenset[int]
    ref: Reference | None
    th: LocalizeThresholds

    @property
    def mode(self) -> str:
        return INTERNAL if self.b is None else BASELINE


def baseline_regions(sides: Sides, region: Masks) -> tuple[Masks | None, list[Masks]]:
    """The region on the shared dimensions (None when it fixes no shared dimension but the
    stratum) and its one-dimension marginals (when it has two dimensions or more)."""
    shared = restrict(region, sides.compared)
    if not any(d != sides.stratum for d in shared):
        return None, []
    if len(shared) < 2:
        return shared, []
    return shared, [{d: m} for d, m in shared.items() if d != sides.stratum]


def estimate(sides: Sides, region: Masks) -> tuple[Estimate, float]:
    """The region's estimate and the variance of its log rate ratio (delta method)."""
    est, var, _ = estimate_with_regions(sides, region)
    return est, var


def estimate_with_regions(
    sides: Sides, region: Masks
) -> tuple[Estimate, float, BaselineRegions | None]:
    """:func:`estimate`, and the baseline's regions and weights behind it."""
    t, s = sides.t, sides.stratum
    sums_r, all_t = region_sums(t, region, s), region_sums(t, {}, s)
    mom_r = region_moments(t, region)
    if sides.b is None:
        return versus_rest(sums_r, all_t), log_contrast_var(t, region), None
    b = sides.b
    shared, marginals = baseline_regions(sides, region)
    b_r = None if shared is None else region_sums(b, shared, s)
    b_m = [region_sums(b, m, s) for m in marginals]
    weights = baseline_weights(sides, shared, marginals)
    est = versus_baseline(sums_r, all_t, b_r, b_m, region_sums(b, {}, s), weights)
    mom_b = region_moments(b, shared or {})
    w = 1.0 if b_r is None else weights[0]
    a_r, a_b = float(mom_r.mom[Field.K3]), float(mom_b.mom[Field.K3])
    var = float(relvar(mom_r.own(), a_r) + weighted(w, relvar(mom_b.own(), a_b)))
    spec = t.spec
    regions = BaselineRegions(
        None if shared is None else exact_codes(spec, shared),
        [exact_codes(spec, m) for m in marginals],
        weights,
    )
    return est, var, regions


def baseline_weights(
    sides: Sides, shared: Masks | None, marginals: list[Masks]
) -> tuple[float, list[float]]:
    """Shrinkage weights of the baseline's region and of its marginals (``localize.reference``)."""
    b, ref = sides.b, sides.ref
    if b is None or ref is None or shared is None:
        return 1.0, []

    def weight(region: Masks) -> float:
        rm = region_moments(b, region)
        return float(ref.weight(tuple(region), relvar(rm.own(), float(rm.mom[Field.K3]))))

    return weight(shared), [weight(m) for m in marginals]


def merge_siblings(sides: Sides, picked: list[Selected]) -> list[tuple[Masks, Selected]]:
    """Findings on the same dimensions, one value apart, whose rate ratios agree within
    ``merge_z`` standard errors, become one finding with a set of values (repeatedly)."""
    groups = [(p.region, p) for p in picked]
    merged = True
    while merged:
        merged = False
        for i in range(len(groups)):
            for j in range(i + 1, len(groups)):
                union = _union(sides, groups[i][0], groups[j][0])
                if union is not None:
                    groups[i] = (union, groups[i][1])
                    del groups[j]
                    merged = True
                    break
            if merged:
                break
    return groups


def drop_aliases(
    sides: Sides, groups: list[tuple[Masks, Selected]]
) -> list[tuple[Masks, Selected, list[Masks]]]:
    """Each region with the later ones that hold exactly its tokens under another name (a
    turn-kind region and the turns it covers, where the target has no other turn), which are
    not reported apart: ``(region, picked, aliases)``."""
    out: list[tuple[Masks, Selected, list[Masks]]] = []
    for region, picked in groups:
        first = next((o for o in out if same_tokens(sides, o[0], region)), None)
        if first is None:
            out.append((region, picked, []))
        else:
            first[2].append(region)
    return out


def fold_seen_again(sides: Sides, findings: list[tuple[Finding, Masks]]) -> list[Finding]:
    """The findings with each one that an earlier kept finding explains (``seen_again``) named
    in that finding's ``seen_as`` instead of reported apart. The earlier finding stays the
    name: the search found it first (the larger specific excess)."""
    kept: list[tuple[Finding, Masks]] = []
    for new in findings:
        home = next((k for k in kept if seen_again(sides, k, new)), None)
        if home is None:
            kept.append(new)
        else:
            _fold(sides, home[0], new[0])
    return [f for f, _ in kept]


def _fold(sides: Sides, home: Finding, seen: Finding) -> None:
    """``seen`` named in ``home`` (with what it had folded in itself)."""
    home.seen_as += [seen.where, *seen.same_as, *seen.seen_as]
    home.seen_as_named += [seen.named, *seen.same_as_named, *seen.seen_as_named]
    home.sentence = sentence(home, sides.mode, sides.th.rate_ci_level)


def seen_again(sides: Sides, earlier: tuple[Finding, Masks], later: tuple[Finding, Masks]) -> bool:
    """Whether ``later`` is ``earlier`` seen through other dimensions: no hotter than it (its
    interval reaches down to the earlier rate ratio), and its tokens outside the earlier region
    under ``min_specificity`` times the rate of the rest of the selection outside both, at the
    same token probabilities (with or without a baseline: the question is whether it adds
    anything to the earlier finding). The intersection is read from a table the cube holds;
    where it holds none, the two stay apart."""
    (fe, re), (fl, rl) = earlier, later
    if not fl.rate_ratio_ci[0] <= fe.rate_ratio:
        return False
    t, s = sides.t, sides.stratum
    a, b = on_parents(t, re), on_parents(t, rl)
    both = {d: a[d] & b[d] if d in b else a[d] for d in a}
    both.update({d: m for d, m in b.items() if d not in a})
    if not t.has(tuple(sorted(both))):
        return False
    whole, inside = region_sums(t, {}, s), region_sums(t, both, s)
    sums_e, sums_l = region_sums(t, a, s), region_sums(t, b, s)
    n_out, a_out = sums_l.n - inside.n, sums_l.a - inside.a
    ref_n, ref_a = whole.n - sums_e.n - n_out, whole.a - sums_e.a - a_out
    expected_out = float(np.sum(n_out * div(ref_a, ref_n)))
    if not expected_out > 0:
        return True  # nothing of it outside the earlier finding
    return float(np.sum(a_out)) < sides.th.min_specificity * expected_out


def same_tokens(sides: Sides, a: Masks, b: Masks) -> bool:
    """Whether two regions hold the same tokens for certain: equal once each dimension that is
    a known function of another is written on that other (``on_parents``), counting only the
    values the target has tokens in."""
    t = sides.t
    a, b = on_parents(t, a), on_parents(t, b)
    if set(a) != set(b):
        return False
    return all(np.array_equal(a[d] & (t.n[(d,)] > 0), b[d] & (t.n[(d,)] > 0)) for d in a)


def _union(sides: Sides, a: Masks, b: Masks) -> Masks | None:
    if set(a) != set(b):
        return None
    differ = [d for d in a if not np.array_equal(a[d], b[d])]
    if len(differ) != 1:
        return None
    d = differ[0]
    if is_regime(sides.t, d, sides.th) and not readable(a[d] | b[d]):
        return None  # a regime's set keeps a few ranges: the two stay findings of their own
    (ea, va), (eb, vb) = estimate(sides, a), estimate(sides, b)
    la, lb = float(ea.rate_ratio), float(eb.rate_ratio)
    if not (la > 0 and lb > 0) or abs(math.log(la) - math.log(lb)) > sides.th.merge_z * math.sqrt(
        va + vb
    ):
        return None
    return {**a, d: a[d] | b[d]}


def finding(
    sides: Sides, region: Masks, picked: Selected, aliases: Sequence[Masks] = ()
) -> Finding:
    """The reported finding of a region the search picked (``aliases``: other regions of the
    same tokens, named beside it)."""
    t, spec = sides.t, sides.t.spec
    est, var, baseline = estimate_with_regions(sides, region)
    sums_r = region_sums(t, region, sides.stratum)
    moments = region_moments(t, region)
    seqs = moments.g
    n_r, a_r = float(sums_r.n.sum()), float(sums_r.a.sum())
    rr = float(est.rate_ratio)
    z = norm_ppf(0.5 + sides.th.rate_ci_level / 2)
    half = z * math.sqrt(var) if math.isfinite(var) else math.inf
    ci = (rr * math.exp(-half), rr * math.exp(half)) if rr > 0 else (math.nan, math.nan)
    f_all = _expected_total(sides)
    out = Finding(
        where=_where(sides, region),
        tokens=round(n_r),
        sequences=seqs,
        token_share=n_r / t.total_n,
        mass_share=float(div(a_r, t.total_a, math.nan)),
        expected=float(est.expected),
        excess=float(est.excess),
        excess_share=_finite(est.excess_share),
        rate_ratio=rr,
        rate_ratio_ci=ci,
        specificity=picked.specificity,
        z=picked.z,
        surprise=surprise(float(est.expected) / f_all, a_r / t.total_a),
        region=exact_codes(spec, region),
        baseline=baseline,
        same_as=[_where(sides, r) for r in aliases],
        effective_sequences=_finite(effective_sequences(moments.mom)),
        named=named(sides, region),
        same_as_named=[named(sides, r) for r in aliases],
    )
    out.sentence = sentence(out, sides.mode, sides.th.rate_ci_level)
    return out


def _expected_total(sides: Sides) -> float:
    if sides.b is None:
        return sides.t.total_a
    t_all, b_all = (region_sums(x, {}, sides.stratum) for x in (sides.t, sides.b))
    return float(expected(t_all, rates(b_all)))


def exact_codes(spec: CubeSpec, region: Masks) -> Region:
    """A region of search-level values as the exact codes of each dimension."""
    return {
        d: tuple(int(c) for v in np.flatnonzero(m) for c in spec.members(d, int(v)))
        for d, m in sorted(region.items())
    }


def _where(sides: Sides, region: Masks) -> dict[str, str]:
    """Dimension name -> label of its values, token dimensions first (as the caller listed);
    values the target has no tokens in are left out of the label (a region may span them)."""
    spec = sides.t.spec
    return {
        spec.dims[d].name: spec.level_label(d, _held(sides, region, d))
        for d in _order(sides, region)
    }


def named(sides: Sides, region: Masks) -> dict[str, str]:
    """:func:`_where` as a person reads it: a few ranges or values one by one, more by their
    structure (``stats/value_names.py``)."""
    spec, t = sides.t.spec, sides.t
    out = {}
    for d in _order(sides, region):
        codes = spec.codes_of(d, _held(sides, region, d))
        present = spec.codes_of(d, np.flatnonzero(t.n[(d,)] > 0))
        out[spec.dims[d].name] = name_values(spec.dims[d], codes, present)
    return out


def _order(sides: Sides, region: Masks) -> list[int]:
    spec = sides.t.spec
    return sorted(region, key=lambda d: (not spec.is_token_dim(d), d))


def _held(sides: Sides, region: Masks, d: int) -> np.ndarray:
    """The region's levels of ``d`` the target has tokens in (all of them when none)."""
    held = region[d] & (sides.t.n[(d,)] > 0)
    return np.flatnonzero(held if held.any() else region[d])


def surprise(p: float, q: float) -> float:
    """Adtributor's Jensen-Shannon term of a cell whose share of the expected mass is ``p`` and
    of the actual mass ``q``."""
    if not (p > 0 and q > 0):
        return 0.5 * (p if p > 0 else q) * math.log(2) if (p > 0 or q > 0) else 0.0
    m = p + q
    return 0.5 * (p * math.log(2 * p / m) + q * math.log(2 * q / m))


def _finite(x: np.ndarray | float) -> float | None:
    v = float(x)
    return v if math.isfinite(v) else None
