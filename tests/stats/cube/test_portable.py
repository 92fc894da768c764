"""A part's cube kept by label (``stats/cube/portable.py``): loaded under a spec with more steps
it is bit for bit the part's cube read under that spec; a stored step absent from the spec, or
blocks of steps that would merge, are a miss."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl.analysis.explain import LABELLED, CubeExtra, cube_spec
from mismatchctl.analysis.selection import select
from mismatchctl.engines import plan as K
from mismatchctl.engines.local import part_groups
from mismatchctl.ingest import source as ingest_source
from mismatchctl.stats.bins import LOG_EDGES
from mismatchctl.stats.cube.part import as_cube
from mismatchctl.stats.cube.portable import from_portable, to_portable
from mismatchctl.stats.cube.spec import CubeSpec
from mismatchctl.store import parts as store_parts
from tests.helpers import multi_gpu_dump


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run ``a`` (steps 0-11, parts of a few steps) and run ``c`` (steps 20-31)."""
    base = tmp_path_factory.mktemp("portable-cube")
    multi_gpu_dump(base / "a.parquet", seed=1)
    multi_gpu_dump(base / "c.parquet", seed=2)
    table = pq.read_table(base / "c.parquet")
    steps = table.column("step").to_numpy() + 20
    pq.write_table(table.set_column(0, "step", [steps]), base / "c.parquet")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_parts, "PART_TOKENS", 4000)
        mp.setattr(ingest_source, "BATCH_TOKENS", 4000)
        for run in ("a", "c"):
            mismatchctl.ingest([base / f"{run}.parquet"], run=run, store=base / "store")
    return base / "store"


def _states(sel: K.Selection, spec: CubeSpec) -> list:
    """Each part's cube state under ``spec`` (the first dense, the others sparse)."""
    extra = CubeExtra(spec)
    return [
        part_groups(t, [], LOG_EDGES, sel.rows, [extra], K.DEFAULT_BINNING)[1][0] for t in sel.tasks
    ]


def _bits(state: object) -> np.ndarray:
    return as_cube(state).state.view(np.uint64)  # type: ignore[arg-type]


def _specs(store: Path, cap: int | None = None) -> tuple[K.Selection, CubeSpec, CubeSpec]:
    opened = mismatchctl.open_store(store)
    a, c = select(opened, ["a"]), select(opened, ["c"])
    alone, both = cube_spec([a], LOG_EDGES), cube_spec([a, c], LOG_EDGES)
    if cap is not None:
        alone, both = (dataclasses.replace(s, block_cap=cap) for s in (alone, both))
    return a, alone, both


def test_a_state_moved_to_a_spec_with_more_steps_and_runs_is_the_cold_one(store: Path) -> None:
    a, alone, both = _specs(store)
    assert alone.dims[1].size == 12 and both.dims[1].size == 24 and both.dims[0].size == 2
    kept, cold = _states(a, alone), _states(a, both)
    assert len(kept) >= 3
    for part, want in zip(kept, cold, strict=True):
        moved = from_portable(to_portable(part), both, LABELLED)
        assert moved is not None
        assert np.array_equal(_bits(moved), _bits(want))
        back = from_portable(to_portable(want), alone, LABELLED)  # and back: c's labels unused
        assert back is not None and np.array_equal(_bits(back), _bits(part))


def test_blocks_of_steps_move_only_where_they_stay_apart(store: Path) -> None:
    """Steps seen in blocks (``block_cap``): a part's state moves when each of its blocks
    lands in one block and no two in the same; then it is exactly the cold state."""
    a, alone, both = _specs(store, cap=4)
    assert alone.blocked(1) and both.blocked(1)
    outcomes = []
    for part, want in zip(_states(a, alone), _states(a, both), strict=True):
        moved = from_portable(to_portable(part), both, LABELLED)
        outcomes.append(moved is not None)
        if moved is not None:
            assert np.array_equal(_bits(moved), _bits(want))
    same = from_portable(to_portable(_states(a, both)[0]), both, LABELLED)
    assert same is not None and outcomes  # under its own spec: as kept


def test_a_stored_step_absent_from_the_spec_misses(store: Path) -> None:
    opened = mismatchctl.open_store(store)
    a = select(opened, ["a"])
    some = select(opened, ["a"], K.StepRange(3, 8))
    narrow = cube_spec([some], LOG_EDGES)
    assert narrow.dims[1].labels == tuple(str(s) for s in range(3, 9))
    states = _states(a, cube_spec([a], LOG_EDGES))
    moved = [from_portable(to_portable(s), narrow, LABELLED) for s in states]
    assert None in moved  # the parts with a step outside 3-8
    inside = [(t, m) for t, m in zip(a.tasks, moved, strict=True) if m is not None]
    assert inside  # the parts of steps 3-8 alone move, exactly
    whole = dataclasses.replace(a, tasks=[t for t, _ in inside])
    for want, (_, m) in zip(_states(whole, narrow), inside, strict=True):
        assert np.array_equal(_bits(m), _bits(want))
