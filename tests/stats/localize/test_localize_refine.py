"""The refiner's sums along a dimension (stats/localize/refine.py, ``Refiner.along``): the cells
the region's other masks keep, taken out of the table before summing, give the sums of the
whole table with every other cell zeroed (to the last bits: the terms are the same, the order
of their additions may differ), with and without a baseline."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from mismatchctl.stats.cube.cube import Cube
from mismatchctl.stats.localize.reference import baseline_reference, no_reference
from mismatchctl.stats.localize.refine import Refiner
from mismatchctl.stats.localize.search import Baseline, Search
from mismatchctl.stats.localize.tables import Dims, Masks, SideTables, expected_mass, stratum_rates
from mismatchctl.stats.localize.thresholds import LocalizeThresholds
from tests.helpers import slow_param
from tests.stats.localize.localize_data import Plan, pair

TH = LocalizeThresholds()


@functools.cache
def _cubes() -> tuple[Cube, Cube]:
    return pair(Plan(cause="kv+gpu", magnitude=4.0, steps=10, seqs_per_step=30, seed=4))


def _refiner(with_baseline: bool) -> Refiner:
    target, base = _cubes()
    t = SideTables(target)
    s = target.spec.index("bin")
    e_t = expected_mass(t, stratum_rates(t, s), s)
    tables = [d for d in t.tables if d and d != (s,)]
    if not with_baseline:
        return Refiner(Search(t, e_t, no_reference(t), s, tables, TH))
    b = SideTables(base)
    k_b = stratum_rates(b, s)
    compared = frozenset(range(len(target.spec.dims)))
    ref = baseline_reference(t, b, expected_mass(b, k_b, s), s, compared, TH.min_sequences)
    e_tb = expected_mass(t, k_b, s)
    return Refiner(Search(t, e_t, ref, s, tables, TH, e_tb, Baseline(b, compared)))


def _masked(r: Refiner, region: Masks, d: int) -> dict[str, np.ndarray]:
    """The sums with every cell outside the region's other masks zeroed."""
    t, s = r.t, r.s
    dims: Dims = tuple(sorted({*region, d}))
    shape = t.shape(dims)
    w = np.ones(shape, bool)
    for e, mask in region.items():
        if e != d:
            w &= np.asarray(t.lift(mask, (e,), dims), bool)
    other = tuple(i for i, e in enumerate(dims) if e != d)
    tok = tuple(i for i in other if t.spec.is_token_dim(dims[i]))

    def total(x: np.ndarray) -> np.ndarray:
        x = np.broadcast_to(x, shape + np.shape(x)[len(shape) :])
        return np.where(w.reshape(w.shape + (1,) * (x.ndim - w.ndim)), x, 0.0).sum(axis=other)

    f = s.model[dims] if s.e_tb is None else s.e_tb[dims] * s.ref.q[dims]
    g = np.where(w, t.g[dims], 0.0)
    g = g.max(axis=tok, keepdims=True) if tok else g
    return {
        "mom": total(t.mom[dims]), "m": total(s.model[dims]), "f": total(f),
        "vsum": total(t.v[dims]), "sdsum": total(np.sqrt(t.v[dims])), "g": g.sum(axis=other),
    }  # fmt: skip


def _region(r: Refiner, fixed: dict[str, slice | list[int]]) -> Masks:
    out = {}
    for name, values in fixed.items():
        d = r.t.spec.index(name)
        mask = np.zeros(r.t.spec.levels(d), bool)
        mask[values] = True
        out[d] = mask
    return out


REGIONS = [
    {"kv_position": slice(3, None)},
    {"gpu": [1], "turn": slice(1, None)},
    {"step": [0, 3, 4, 9], "kv_position": slice(2, 6)},
]


@pytest.mark.parametrize(
    ("fixed", "with_baseline"),
    [
        (REGIONS[0], False),
        slow_param(REGIONS[0], True),
        slow_param(REGIONS[1], False),
        slow_param(REGIONS[1], True),
        slow_param(REGIONS[2], False),
        (REGIONS[2], True),  # the quick pair: one dimension alone, two with a baseline
    ],
    ids=[
        "fixed0-False",
        "fixed0-True",
        "fixed1-False",
        "fixed1-True",
        "fixed2-False",
        "fixed2-True",
    ],
)
def test_the_sums_along_a_dimension_are_the_masked_table_s(
    with_baseline: bool, fixed: dict[str, slice | list[int]]
) -> None:
    r = _refiner(with_baseline)
    region = _region(r, fixed)
    checked = 0
    for d in range(len(r.t.spec.dims)):
        if not r.t.has(tuple({*region, d})):
            continue
        got, want = r.along(region, d), _masked(r, region, d)
        for key, value in want.items():
            assert got[key].shape == value.shape, key
            np.testing.assert_allclose(got[key], value, rtol=1e-12, atol=0.0, err_msg=key)
        assert np.any(got["mom"] != 0.0)
        checked += 1
    assert checked >= 4
