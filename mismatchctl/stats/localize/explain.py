"""``explain``: where is the K3 mass of a target selection, and what explains its difference from a
baseline? Multidimensional root-cause localization on the cube's cell aggregates (no store
access): docs/explain.md gives the algorithm, every constant (``LocalizeThresholds``) and the
interval methods.

With a baseline (another run, a slice, earlier steps), the expected mass of every target cell is
the baseline's rate in that cell at the target's token mix over the probability bins; findings
are cells that are hotter than the rest of the target by more than the baseline's same cell is
(specific), significantly (family-wise over every tested cell), and carry a share of the mass.
Without a baseline the selection is its own reference: every cell against the rest of the
selection at the same token probabilities, so a localized fault is found whatever the token mix
(low-probability tokens always have the largest raw K3: the plain lift table says so too).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from mismatchctl.stats.cube.cube import Cube, Field
from mismatchctl.stats.decompose import decompose
from mismatchctl.stats.localize.estimates import versus_rest
from mismatchctl.stats.localize.findings import (
    Sides,
    drop_aliases,
    estimate,
    finding,
    fold_seen_again,
    merge_siblings,
)
from mismatchctl.stats.localize.math import div, norm_ppf, relvar
from mismatchctl.stats.localize.reference import baseline_reference, no_reference
from mismatchctl.stats.localize.refine import Refiner
from mismatchctl.stats.localize.regions import region_moments, region_sums
from mismatchctl.stats.localize.result import CellShare, Explanation, Finding, lead_sentence
from mismatchctl.stats.localize.search import Baseline, Search, Selected, effective_sequences
from mismatchctl.stats.localize.tables import Dims, SideTables, expected_mass, stratum_rates
from mismatchctl.stats.localize.thresholds import LocalizeThresholds
from mismatchctl.stats.localize.uniform import uniform_dims


def explain(
    target: Cube,
    baseline: Cube | None = None,
    *,
    stratum: str | None = "bin",
    thresholds: LocalizeThresholds | None = None,
    leads: bool = False,
    tables: SideTables | None = None,
) -> Explanation:
    """Localize the target's K3 excess over the baseline (or its concentration, without one).

    ``stratum``: the dimension whose per-value rates define "the same token mix" (the
    probability bin; None: none). ``leads``: when no cell is a finding and the excess over the
    baseline is significant, the cells that carry it all the same, held by fewer sequences than
    a finding needs (``Explanation.leads``: the search again with ``lead_effective_sequences``
    as its floor). ``tables``: the target's search tables, when the caller has them."""
    th = thresholds or LocalizeThresholds()
    if baseline is not None and baseline.spec != target.spec:
        raise ValueError("target and baseline cubes must have the same dimensions")
    s = None if stratum is None else target.spec.index(stratum)
    t = SideTables(target) if tables is None else tables
    if t.total_n == 0:
        raise ValueError("the target selection has no tokens")
    e_t = expected_mass(t, stratum_rates(t, s), s)
    b = None if baseline is None else SideTables(baseline)
    sides, search, findings = _localized(t, b, e_t, s, th)
    out = _explanation(sides, search, findings, target, baseline)
    out.notes = _notes(t, b, th)
    out.effective_sequences = float(effective_sequences(t.total))
    if b is not None and sides.b is None:  # the overall ratio and the split stay the baseline's
        out.rate_ratio, out.rate_ratio_ci, out.excess = _overall(replace(sides, b=b))
        out.baseline_tokens, out.baseline_vllm_kl = int(b.total_n), float(div(b.total_a, b.total_n))
        if b.total_a == 0:  # a bit-exact baseline: no ratio to it, every token is excess
            out.rate_ratio, out.rate_ratio_ci = None, None
    if leads and not findings and out.significant_excess:
        loose = replace(th, min_effective_sequences=th.lead_effective_sequences)
        lead_sides, _, found = _localized(t, b, e_t, s, loose)
        for f in found:
            f.sentence = lead_sentence(
                f, lead_sides.mode, th.rate_ci_level, th.min_effective_sequences
            )
        out.leads = found
    return out


def _localized(
    t: SideTables, b: SideTables | None, e_t: dict, s: int | None, th: LocalizeThresholds
) -> tuple[Sides, Search, list[Finding]]:
    """The search (against the baseline, or within the target when there is none or it is a
    few sequences' worth) and its findings."""
    if b is None or effective_sequences(b.total) < th.min_baseline_sequences:
        sides = Sides(t, None, s, frozenset(), None, th)
        search = Search(t, e_t, no_reference(t), s, candidate_tables(t, s), th)
    else:
        sides, search = _baseline_search(t, b, e_t, s, th)
    picked = _select(search, th)
    found = [
        (finding(sides, region, p, aliases), region)
        for region, p, aliases in drop_aliases(sides, merge_siblings(sides, picked))
    ]
    # the reported interval (of the final, merged region) must exclude 1, as the search's did
    return (
        sides,
        search,
        fold_seen_again(sides, [(f, r) for f, r in found if f.rate_ratio_ci[0] > 1]),
    )


def _notes(t: SideTables, b: SideTables | None, th: LocalizeThresholds) -> list[str]:
    """Plain warnings about selections whose K3 mass is a few sequences' worth."""
    out = []
    n_t = float(effective_sequences(t.total))
    if n_t < th.min_baseline_sequences:
        out.append(
            f"the target's K3 mass is {n_t:.1f} sequences' worth: a few sequences carry it, "
            "findings cannot be held by fewer than "
            f"{th.min_effective_sequences:g}"
        )
    if b is not None and b.total_a == 0:
        out.append(
            "the baseline's two sides agree on every token (its vllm_kl is exactly 0: a "
            "bit-exact stack), so every token of the target that differs is excess over it and "
            "no rate ratio exists; the target was localized against itself"
        )
    elif b is not None:
        n_b = float(effective_sequences(b.total))
        if n_b < th.min_baseline_sequences:
            out.append(
                f"the baseline's K3 mass is {n_b:.1f} sequences' worth: its rates predict "
                "nothing, so the target was localized against itself"
            )
    return out


def _baseline_search(
    t: SideTables, b: SideTables, e_t: dict, s: int | None, th: LocalizeThresholds
) -> tuple[Sides, Search]:
    if b.total_n == 0:
        raise ValueError("the baseline selection has no tokens")
    compared = compared_dims(t, b, s, th)
    k_b = stratum_rates(b, s)
    e_b, e_tb = expected_mass(b, k_b, s), expected_mass(t, k_b, s)
    ref = baseline_reference(t, b, e_b, s, compared, th.min_sequences)
    search = Search(t, e_t, ref, s, candidate_tables(t, s), th, e_tb, Baseline(b, compared))
    return Sides(t, b, s, compared, ref, th), search


def _select(search: Search, th: LocalizeThresholds) -> list[Selected]:
    """Greedy rounds: the best passing candidate, made parsimonious, explained away, until none
    passes; then one round of backfitting (:func:`_backfit`)."""
    refiner = Refiner(search)
    picked: list[Selected] = []
    for _ in range(th.max_findings):
        region = search.best_region()
        if region is None:
            break
        sel = refiner.parsimonious(region)
        if not sel.specificity > 1:
            break
        picked.append(sel)
        search.explain_away(sel)
    return _backfit(search, refiner, picked) if len(picked) > 1 else picked


def _backfit(search: Search, refiner: Refiner, picked: list[Selected]) -> list[Selected]:
    """Revisit each finding with the others explained away: when two causes overlap, the one
    found first absorbs part of the other (a long-KV fault first refined to the later turns a
    template fault also heats); with the other explained, its parsimony moves run again, and a
    finding no longer passing is dropped (the others explain it)."""
    out: list[Selected] = []
    for i, sel in enumerate(picked):
        search.explain_away(sel, 1.0 / sel.specificity)  # the model without this finding
        if refiner.passes(refiner.stat(sel.region))[0]:
            new = refiner.parsimonious(sel.region)
            if new.specificity > 1 and not any(_same(new, o) for o in out):
                search.explain_away(new)
                picked[i] = new
                out.append(new)
                continue
        picked[i] = Selected(sel.region, 1.0, 0.0)  # explains nothing any more
    return out


def _same(a: Selected, b: Selected) -> bool:
    return set(a.region) == set(b.region) and all(
        np.array_equal(a.region[d], b.region[d]) for d in a.region
    )


def compared_dims(
    t: SideTables, b: SideTables, stratum: int | None, th: LocalizeThresholds
) -> frozenset[int]:
    """Dimensions on which the baseline's rate is conditioned: those where at least
    ``compare_overlap`` of the target's tokens have a value the baseline has (and the
    stratum)."""
    out = set() if stratum is None else {stratum}
    for d in range(len(t.spec.dims)):
        shared = float(t.n[(d,)][b.n[(d,)] > 0].sum())
        if shared >= th.compare_overlap * t.total_n:
            out.add(d)
    return frozenset(out)


def candidate_tables(t: SideTables, stratum: int | None) -> list[Dims]:
    """Tables whose cells are tested: not the whole selection, not the stratum alone (it defines
    the expectation), and no dimension on which the target has a single value (its cells repeat
    their parents')."""
    constant = {d for d in range(len(t.spec.dims)) if np.count_nonzero(t.n[(d,)]) <= 1}
    return [
        dims for dims in t.tables if dims and dims != (stratum,) and not constant.intersection(dims)
    ]


def _explanation(
    sides: Sides, search: Search, findings: list[Finding], target: Cube, baseline: Cube | None
) -> Explanation:
    t, spec, th = sides.t, sides.t.spec, sides.th
    used = {
        spec.index(name) for f in findings for w in (f.where, *f.same_as, *f.seen_as) for name in w
    }
    tested = sorted({d for dims in search.candidates for d in dims} - used)
    if sides.b is not None and sides.stratum is not None and sides.stratum not in used:
        tested = sorted({*tested, sides.stratum})
    if sides.b is None:  # the stratum defines the internal expectation: trivially uniform
        tested = [d for d in tested if d != sides.stratum]
    ratio, ci, excess = _overall(sides)
    return Explanation(
        mode=sides.mode,
        tokens=int(t.total_n),
        vllm_kl=float(div(t.total_a, t.total_n, math.nan)),
        rate_ratio=ratio,
        rate_ratio_ci=ci,
        excess=excess,
        findings=findings,
        uniform=uniform_dims(search, tested),
        decomposition=[] if baseline is None else decompose(target, baseline),
        new=[] if sides.b is None else new_cells(sides),
        unshared=[]
        if sides.b is None
        else [d.name for k, d in enumerate(spec.dims) if k not in sides.compared],
        lift=lift_table(t, th.min_tokens),
        tested=search.tested,
        z_family=search.z_family,
        stratum=None if sides.stratum is None else spec.dims[sides.stratum].name,
        baseline_spread=_spread(sides),
        baseline_tokens=None if sides.b is None else int(sides.b.total_n),
        baseline_vllm_kl=None
        if sides.b is None
        else float(div(sides.b.total_a, sides.b.total_n, math.nan)),
        level=th.rate_ci_level,
        bootstrap_replicates=th.bootstrap_replicates,
        stratum_index=sides.stratum,
    )


def _spread(sides: Sides) -> dict[str, float]:
    """Per shared dimension, ``exp(tau)``: how much the baseline's own values' rates differ
    beyond their noise (1: not at all; its cells are then shrunk to their prior)."""
    if sides.ref is None:
        return {}
    spec = sides.t.spec
    return {
        spec.dims[d].name: math.exp(math.sqrt(sides.ref.tau2[(d,)]))
        for d in sorted(sides.compared)
        if (d,) in sides.ref.tau2 and d != sides.stratum
    }


def _overall(sides: Sides) -> tuple[float | None, tuple[float, float] | None, float | None]:
    """The whole selection's rate ratio to the baseline at its own token mix, its interval,
    and the excess ``A - F``."""
    if sides.b is None:
        return None, None, None
    t, b = sides.t, sides.b
    k_b = stratum_rates(b, sides.stratum)
    if sides.stratum is None:
        f = t.total_n * float(k_b[0])
    else:
        f = float(np.sum(t.n[(sides.stratum,)] * k_b))
    ratio = float(div(t.total_a, f, math.nan))
    var = float(relvar(t.v[()], t.total_a) + relvar(b.v[()], b.total_a))
    half = norm_ppf(0.5 + sides.th.rate_ci_level / 2) * math.sqrt(var)
    return ratio, (ratio * math.exp(-half), ratio * math.exp(half)), t.total_a - f


def new_cells(sides: Sides) -> list[CellShare]:
    """Values of shared dimensions the target has (with enough tokens) and the baseline never
    had: reported as new, never predicted from nothing."""
    t, b = sides.t, sides.b
    assert b is not None
    out = []
    for d in sorted(sides.compared):
        new = (t.n[(d,)] >= sides.th.min_tokens) & (b.n[(d,)] == 0)
        out += [_share(t, d, int(v)) for v in np.flatnonzero(new)]
    return out


def lift_table(t: SideTables, min_tokens: int) -> list[CellShare]:
    """Every value of every dimension with enough tokens: token share, K3 mass share and lift
    (mass share over token share), highest lift first."""
    rows = [
        _share(t, d, int(v))
        for d in range(len(t.spec.dims))
        for v in np.flatnonzero(t.n[(d,)] >= min_tokens)
    ]
    return sorted(rows, key=lambda r: -r.lift if math.isfinite(r.lift) else math.inf)


def _share(t: SideTables, d: int, v: int) -> CellShare:
    n, a = float(t.n[(d,)][v]), float(t.a[(d,)][v])
    token_share = n / t.total_n
    mass_share = float(div(a, t.total_a, math.nan))
    return CellShare(
        where={t.spec.dims[d].name: t.spec.level_label(d, [v])},
        tokens=round(n),
        token_share=token_share,
        mass_share=mass_share,
        lift=float(div(mass_share, token_share, math.nan)),
    )


def contrast(
    cube: Cube,
    region: dict[str, list[int]],
    stratum: str | None = "bin",
    level: float = 0.95,
    tables: SideTables | None = None,
) -> tuple[float, tuple[float, float]] | None:
    """A region (dimension name -> its search-level codes) against the rest of the selection:
    its rate ratio at the same token mix over ``stratum`` (None: the plain ratio of mean K3) and
    the delta-method interval at ``level`` (sequence-clustered, covariance included for regions
    on sequence dimensions). None when either side has no mass. ``tables``: the cube's, when
    the caller has them."""
    t = SideTables(cube) if tables is None else tables
    spec = cube.spec
    masks = {}
    for name, codes in region.items():
        d = spec.index(name)
        mask = np.zeros(spec.levels(d), bool)
        mask[list(codes)] = True
        masks[d] = mask
    s = None if stratum is None else spec.index(stratum)
    sides = Sides(t, None, s, frozenset(), None, LocalizeThresholds())
    est, var = estimate(sides, masks)
    ratio = float(est.rate_ratio)
    if not (ratio > 0 and math.isfinite(ratio) and math.isfinite(var) and var >= 0):
        return None
    half = norm_ppf(1 - (1 - level) / 2) * math.sqrt(var)
    return ratio, (ratio * math.exp(-half), ratio * math.exp(half))


def contrast_baseline(
    cube: Cube,
    base: Cube,
    region: dict[str, list[int]],
    stratum: str = "bin",
    level: float = 0.95,
) -> tuple[float, tuple[float, float]] | None:
    """A region of the selection against the same region of a baseline (same spec): the
    region's rate over the baseline region's at the region's own token mix over ``stratum``, and
    the interval at ``level`` (the two sides' variances added: independent runs). None when
    either side's region has no mass."""
    spec = cube.spec
    masks = {}
    for name, codes in region.items():
        d = spec.index(name)
        masks[d] = np.isin(np.arange(spec.levels(d)), codes)
    t, b = SideTables(cube), SideTables(base)
    m_t, m_b = region_moments(t, masks), region_moments(b, masks)
    a_t, a_b = float(m_t.mom[Field.K3]), float(m_b.mom[Field.K3])
    if not (a_t > 0 and a_b > 0):
        return None
    s = spec.index(stratum)
    sums_t, sums_b = region_sums(t, masks, s), region_sums(b, masks, s)
    k = div(sums_b.a, sums_b.n, 0.0)  # the baseline region's rate in each stratum
    expected = float(np.sum(sums_t.n * k))
    ratio = float(div(a_t, expected, math.nan))
    var = float(relvar(m_t.own(), a_t) + relvar(m_b.own(), a_b))
    if not (ratio > 0 and math.isfinite(ratio) and math.isfinite(var)):
        return None
    half = norm_ppf(1 - (1 - level) / 2) * math.sqrt(var)
    return ratio, (ratio * math.exp(-half), ratio * math.exp(half))


def contrast_within(
    cube: Cube,
    within: dict[str, list[int]],
    dim: str,
    codes: list[int],
    stratum: str = "bin",
    level: float = 0.95,
    tables: SideTables | None = None,
) -> tuple[float, tuple[float, float]] | None:
    """A part of a region against the rest of that region: the tokens of ``within`` (dimension
    name -> search-level codes) at ``codes`` of ``dim`` against its tokens at the other values
    of ``dim``, at the region's own rates over ``stratum`` (the same token mix), and the
    interval at ``level``: the two parts' own variances taken as independent (conservative: a
    sequence's parts co-vary positively, as ``localize.regions.log_contrast_var``). None when a
    part has no mass, ``dim`` is blocked (its search-level codes are not its values) or the
    cube holds no table of these dimensions with the stratum. ``tables``: the cube's search
    tables when the caller contrasts many parts of one cube (built here otherwise)."""
    spec = cube.spec
    d, s = spec.index(dim), spec.index(stratum)
    if spec.blocked(d) or spec.table_index(sorted({d, s, *map(spec.index, within)})) is None:
        return None
    masks = {}
    for name, values in within.items():
        e = spec.index(name)
        masks[e] = np.isin(np.arange(spec.levels(e)), values)
    part = np.isin(np.arange(spec.levels(d)), codes)
    keep = masks.get(d, np.ones(spec.levels(d), bool))
    inside, rest = {**masks, d: part & keep}, {**masks, d: ~part & keep}
    t = SideTables(cube) if tables is None else tables
    m_in, m_rest = region_moments(t, inside), region_moments(t, rest)
    a_in, a_rest = float(m_in.mom[Field.K3]), float(m_rest.mom[Field.K3])
    if not (a_in > 0 and a_rest > 0):
        return None
    est = versus_rest(region_sums(t, inside, s), region_sums(t, {**masks, d: keep}, s))
    var = float(relvar(m_in.own(), a_in) + relvar(m_rest.own(), a_rest))
    ratio = float(est.rate_ratio)
    if not (ratio > 0 and math.isfinite(ratio) and math.isfinite(var)):
        return None
    half = norm_ppf(1 - (1 - level) / 2) * math.sqrt(var)
    return ratio, (ratio * math.exp(-half), ratio * math.exp(half))
