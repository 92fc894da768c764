"""The search's model explained away lazily (stats/localize/model.py): each table, whenever and
in whatever order it is read, holds the eager update's bits, and a table not read is not
computed."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import mismatchctl.stats.localize.model as model_module
from mismatchctl.stats.localize.model import LazyModel
from mismatchctl.stats.localize.tables import (
    Dims,
    Masks,
    SideTables,
    expected_mass,
    overlap,
    stratum_rates,
)
from tests.stats.localize.localize_data import Plan, cube_of


@functools.cache
def _tables() -> tuple[SideTables, dict[Dims, np.ndarray]]:
    cube = cube_of(Plan(cause="kv", magnitude=5.0, steps=12, seqs_per_step=30, seed=3))[0]
    t = SideTables(cube)
    s = cube.spec.index("bin")
    return t, expected_mass(t, stratum_rates(t, s), s)


def _mask(t: SideTables, name: str, values: slice) -> tuple[int, np.ndarray]:
    d = t.spec.index(name)
    mask = np.zeros(t.spec.levels(d), bool)
    mask[values] = True
    return d, mask


def _findings(t: SideTables) -> list[tuple[Masks, float]]:
    """Regions explained away in turn (one undone, as the backfit does), with their factors."""
    kv = dict([_mask(t, "kv_position", slice(3, None))])
    late = dict([_mask(t, "kv_position", slice(3, None)), _mask(t, "step", slice(2, 7))])
    gpu = dict([_mask(t, "gpu", slice(1, 2))])
    return [(kv, 4.0), (gpu, 1.7), (kv, 0.25), (late, 3.2)]


def _eager(t: SideTables, start: dict[Dims, np.ndarray]) -> list[dict[Dims, np.ndarray]]:
    """Every table after each update, computed for every table at once (the update before)."""
    model, out = dict(start), [dict(start)]
    for region, f in _findings(t):
        memo: dict[tuple, np.ndarray] = {}
        grow = {d: overlap(t, model, region, d, memo) for d in t.tables}
        model = {d: model[d] + (f - 1.0) * extra for d, extra in grow.items()}
        out.append(model)
    return out


@pytest.mark.parametrize("order", ["coarse_first", "fine_first", "reads_between"])
def test_every_table_holds_the_eager_bits_whatever_the_order_it_is_read_in(order: str) -> None:
    t, start = _tables()
    eager = _eager(t, start)
    lazy = LazyModel(t, start)
    tables = sorted(t.tables, key=lambda d: (len(d), d))
    if order == "fine_first":
        tables.reverse()
    for k, (region, f) in enumerate(_findings(t)):
        if order == "reads_between":  # some tables read at each version, the rest only at the end
            for d in tables[k::3]:
                assert np.array_equal(lazy[d], eager[k][d])
        lazy.explain_away(region, f)
    assert lazy.version == len(_findings(t))
    for d in tables:
        assert lazy[d].tobytes() == eager[-1][d].tobytes(), d
    for k in range(len(eager)):  # older versions, read afterwards, too (made again)
        for d in tables[::5]:
            assert lazy.at(d, k).tobytes() == eager[k][d].tobytes(), (k, d)
    for d in tables:  # held: the checkpoints and the latest
        kept = lazy.kept(d)
        assert all(v % model_module.KEEP_EVERY == 0 for v in kept[:-1]), (d, kept)


def test_many_updates_keep_a_table_s_checkpoints_only() -> None:
    """Eight updates (the backfit's: a finding undone, then again): a table read after each holds
    every ``KEEP_EVERY``-th version and its latest, and its earlier versions are still the eager
    ones' bits."""
    t, start = _tables()
    findings = _findings(t) * 2
    lazy = LazyModel(t, start)
    d = (t.spec.index("kv_position"),)
    seen = [lazy[d]]
    for region, f in findings:
        lazy.explain_away(region, f)
        seen.append(lazy[d])
    assert lazy.kept(d) == [0, 4, 8]
    for k in (1, 3, 6, 7):
        assert lazy.at(d, k).tobytes() == seen[k].tobytes()
    assert lazy.kept(d) == [0, 4, 8]


def test_a_table_not_read_is_not_computed(monkeypatch: pytest.MonkeyPatch) -> None:
    t, start = _tables()
    calls: list[tuple[Dims, int]] = []  # (table, its update: the update's memo)

    def counted(side: SideTables, arr: object, region: Masks, dims: Dims, memo: dict) -> object:
        calls.append((dims, id(memo)))
        return overlap(side, arr, region, dims, memo)  # type: ignore[arg-type]

    monkeypatch.setattr(model_module, "overlap", counted)
    lazy = LazyModel(t, start)
    for region, f in _findings(t):
        lazy.explain_away(region, f)
    assert calls == []
    d = t.spec.index("step")
    got = lazy[(d,)]
    # the step's table and the tables its overlaps read, each once per update: not all of them
    assert 0 < len({dims for dims, _ in calls}) < len(t.tables) / 2
    assert len(calls) == len(set(calls))
    before = len(calls)
    assert lazy[(d,)] is got and len(calls) == before  # read again: nothing computed
