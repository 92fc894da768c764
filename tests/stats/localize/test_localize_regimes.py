"""The steps of a long run searched as ranges and regimes (stats/localize/regimes.py), the
refiner's screen of a dimension's finer regions (stats/localize/screen.py), against exact
enumerations on small data; and a planted regime of a 1,000-step run found and named."""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import replace

import numpy as np
import pytest

from mismatchctl.stats.cube.cube import Cube, Field
from mismatchctl.stats.localize.explain import explain
from mismatchctl.stats.localize.math import own_var
from mismatchctl.stats.localize.reference import no_reference
from mismatchctl.stats.localize.refine import Refiner
from mismatchctl.stats.localize.regimes import (
    best_interval,
    best_period,
    filled,
    filled_all,
    is_regime,
)
from mismatchctl.stats.localize.screen import screen
from mismatchctl.stats.localize.search import Search
from mismatchctl.stats.localize.tables import SideTables, expected_mass, stratum_rates
from mismatchctl.stats.localize.thresholds import LocalizeThresholds
from mismatchctl.stats.value_names import MAX_RUNS, MIN_PERIODIC, runs
from tests.helpers import slow_param
from tests.stats.localize.localize_data import Plan, cube_of, pair

TH = LocalizeThresholds()
# 1,000 steps of 4 responses of ~100 tokens (450k tokens): K3 x5 at KV >= 512 in steps 500-749
LONG = Plan(
    cause="kv", magnitude=5.0, steps=1000, seqs_per_step=4, mean_len=100,
    fault_steps=tuple(range(500, 750)), kv_min=512, seed=5,
)  # fmt: skip


def _z(mom: np.ndarray, m: np.ndarray, inside: np.ndarray) -> float:
    """The contrast of a set of values with the others, from scratch, one value at a time."""
    a_in = sum(mom[i, Field.K3] for i in range(len(m)) if inside[i])
    a_out = sum(mom[i, Field.K3] for i in range(len(m)) if not inside[i])
    m_in = sum(m[i] for i in range(len(m)) if inside[i])
    m_out = sum(m[i] for i in range(len(m)) if not inside[i])
    s = (a_in / m_in) / (a_out / m_out)
    if not s >= TH.min_specificity:
        return -math.inf
    v_in = float(own_var(mom[inside].sum(axis=0)))
    v_out = float(own_var(mom[~inside].sum(axis=0)))
    return math.log(s) / math.sqrt(v_in / a_in**2 + v_out / a_out**2)


def _moments(seed: int, k: int, hot: set[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per value (a step), the cube's fields of 40 sequences with K3 x3 in ``hot``, and a
    model mass of its tokens at the mean rate."""
    rng = np.random.default_rng(seed)
    mom = np.zeros((k, len(Field)))
    for v in range(k):
        x = rng.integers(50, 400, 40).astype(float)
        y = x * rng.gamma(2.0, 0.01, 40) * (3.0 if v in hot else 1.0)
        mom[v, :6] = x.sum(), y.sum(), (y * y).sum(), (x * x).sum(), (x * y).sum(), 40
    return mom, mom[:, Field.TOKENS] * 0.02


@pytest.mark.parametrize(("seed", "hot"), [(1, set(range(6, 11))), (2, {3, 4}), (3, set())])
def test_the_best_interval_is_the_best_of_every_interval(seed: int, hot: set[int]) -> None:
    """Every interval of at least two of 14 values touching neither end, enumerated one by one:
    the scan returns the one of largest z and counts them all."""
    k = 14
    mom, m = _moments(seed, k, hot)
    values = np.arange(100, 100 + k)  # levels: the scan works on positions among them
    found = best_interval(values, mom, m, TH)
    every = [(i, j) for i in range(1, k - 1) for j in range(i + 1, k - 1)]
    z = []
    for i, j in every:
        inside = np.zeros(k, bool)
        inside[i : j + 1] = True
        z.append(_z(mom, m, inside))
    if not np.isfinite(z).any():
        assert found is None
        return
    assert found is not None
    got, scanned = found
    i, j = every[int(np.argmax(z))]
    assert scanned == len(every) == (k - 2) * (k - 3) // 2
    assert got.tolist() == values[i : j + 1].tolist()
    if hot:
        assert set(got - 100) == hot


def test_the_best_period_is_the_best_of_every_k_th_value() -> None:
    """Every third of 24 steps hot: of every p-th value for p up to ``max_period``, each phase
    (at least ``MIN_PERIODIC`` values), the scan picks those steps."""
    k = 24
    hot = set(range(1, k, 3))
    mom, m = _moments(4, k, hot)
    values = np.arange(k)
    got, scanned = best_period(values, mom, m, TH)  # type: ignore[misc]
    sets = [
        (p, q)
        for p in range(2, TH.max_period + 1)
        for q in range(p)
        if MIN_PERIODIC <= np.count_nonzero(values % p == q) < k
    ]
    z = [_z(mom, m, values % p == q) for p, q in sets]
    p, q = sets[int(np.argmax(z))]
    assert scanned == len(sets)
    assert set(got.tolist()) == set(values[values % p == q].tolist()) == hot


def _refiner(cube: Cube) -> Refiner:
    t = SideTables(cube)
    s = cube.spec.index("bin")
    e_t = expected_mass(t, stratum_rates(t, s), s)
    tables = [d for d in t.tables if d and d != (s,)]
    return Refiner(Search(t, e_t, no_reference(t), s, tables, TH))


@functools.cache
def _small() -> Cube:
    return cube_of(Plan(cause="kv", magnitude=5.0, steps=24, seqs_per_step=40, seed=2))[0]


FIXED = {"kv_position": slice(3, None), "gpu": slice(1, 2), "turn": slice(1, None)}


@pytest.mark.parametrize("fixed", [(), ("kv_position",), ("gpu", "turn")])
def test_the_screen_is_the_refiner_s_own_test_of_every_finer_region(fixed: tuple) -> None:
    """For every dimension and every single value or range the down move offers: counted
    exactly when the refiner's own test counts it, with its z (to rounding)."""
    cube = _small()
    ref = _refiner(cube)
    spec = cube.spec
    region = {}
    for name in fixed:
        d = spec.index(name)
        mask = np.zeros(spec.levels(d), bool)
        mask[FIXED[name]] = True
        region[d] = mask
    checked = 0
    for d in range(len(spec.dims)):
        if d in region or not ref.t.has(tuple({*region, d})):
            continue
        col = ref.along(region, d)
        subsets = ref._subsets(region, d, col)
        got = screen(ref, region, d, col, subsets)
        for i, values in enumerate(subsets):
            want = ref._candidate(region, d, values, 1)
            assert bool(got.counted[i]) == bool(want), (spec.dims[d].name, values)
            if want:
                assert got.z[i] == pytest.approx(want[0][0], rel=1e-9, abs=1e-9)
                checked += 1
    assert checked > 20


@functools.cache
def _long() -> tuple[Cube, Cube]:
    return pair(LONG)


@pytest.mark.parametrize("with_baseline", [slow_param(False), True])
def test_a_regime_of_a_thousand_step_run_is_found_and_named_as_a_range(
    with_baseline: bool,
) -> None:
    """1,000 steps (seen in 128 blocks of 7-8): the fault in steps 500-749 at KV >= 512 is the
    top finding, named as that range of steps (its ends fall on blocks' ends); no finding's
    steps are more than a few ranges."""
    target, base = _long()
    assert is_regime(SideTables(target), target.spec.index("step"), TH)
    ex = explain(target, base if with_baseline else None)
    top = ex.findings[0]
    assert top.where == {"kv_position": "512-4095", "step": "500-749"}
    assert "step 500-749" in top.sentence
    assert top.rate_ratio_ci[0] > 3.0
    for f in ex.findings:
        codes = f.region.get(target.spec.index("step"), ())
        assert len(runs(codes)) <= MAX_RUNS, f.where


def test_a_healthy_thousand_step_run_has_no_finding() -> None:
    target, base = pair(replace(LONG, cause="healthy", magnitude=1.0, seed=8))
    for b in (None, base):
        assert explain(target, b).findings == []


def test_a_short_run_keeps_its_sets_of_steps() -> None:
    """Up to ``regime_values`` steps the step is no regime dimension: its sets are tried as
    sets (a fault in every third of 24 steps: tests/analysis/diagnose/checks/test_localized.py)."""
    t = SideTables(_small())
    step = t.spec.index("step")
    assert not is_regime(t, step, TH)
    assert is_regime(t, step, replace(TH, regime_values=23))
    assert not is_regime(t, t.spec.index("kv_position"), replace(TH, regime_values=2))


def test_the_scanned_intervals_touch_neither_end() -> None:
    mom, m = _moments(5, 8, {0, 1, 2})  # hot at the start: a range from the start, not scanned
    found = best_interval(np.arange(8), mom, m, TH)
    assert found is None or (found[0][0] > 0 and found[0][-1] < 7)
    assert found is None or found[1] == len(list(itertools.combinations(range(1, 7), 2)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_range_filled_at_once_is_each_filled_alone(seed: int) -> None:
    """The refiner's ranges of a regime dimension, filled over the steps the region allows
    (with and without tokens) all at once, are each one's own: the same levels, in order."""
    rng = np.random.default_rng(seed)
    within = rng.random(40) < 0.7
    allowed = np.flatnonzero(within & (rng.random(40) < 0.8))  # the values with tokens
    subsets = [np.array([v]) for v in allowed]
    subsets += [allowed[: j + 1] for j in range(1, len(allowed) - 1)]
    subsets += [allowed[j:] for j in range(1, len(allowed) - 1)]
    subsets.append(np.array([int(np.flatnonzero(~within)[0])]))  # a value the region left out
    found = filled_all(subsets, within)
    assert len(found) == len(subsets)
    for values, got in zip(subsets, found, strict=True):
        want = filled(values, within)
        assert got.dtype == want.dtype and got.tolist() == want.tolist()
    assert found[-1].tolist() == []
