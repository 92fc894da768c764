"""A part's cube state in a form that outlives its spec's label lists (the part cache's entries
of the cube extras, ``engines/part_cache.py``): the touched cells and their sums, with the spec
they were laid out in. Loaded under another spec whose labelled dimensions (step, gpu, run)
list other values, each cell is moved to its place there: its coordinates by
``np.unravel_index`` in the stored table, each labelled coordinate mapped by label, and
``np.ravel_multi_index`` in the current table.

A moved state is bit for bit the one the current spec would have read: every token of a cell
lands in one cell of the current spec (a cell of a block of values is moved only when the
part's values in that block all land in one place), no two cells land in one (their sums would
be added in another order than a read adds them), and the labels keep their order (a read adds
sequences grouped by their codes in lexicographic order, ``cube.group_order``). Anything else is
a miss (None): the part is read again. A dense state is kept as its non-zero rows: folding
those rows into a total adds the same numbers to the same cells (``PartCube.fold_into``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from mismatchctl.stats.cube.cells import SequenceCells
from mismatchctl.stats.cube.cube import Cube
from mismatchctl.stats.cube.part import PartCube, restore
from mismatchctl.stats.cube.spec import CubeSpec, Table


@dataclass(frozen=True)
class PortableCube:
    """A part's touched ``cells`` of ``spec`` and their sums (``rows``, cells x fields)."""

    spec: CubeSpec
    cells: np.ndarray
    rows: np.ndarray


def to_portable(state: Cube | PartCube) -> PortableCube:
    """The state's touched cells (a dense cube's non-zero rows), copied."""
    if isinstance(state, PartCube):
        used = state.used
        return PortableCube(state.spec, state.cells[:used].copy(), state.rows[:used].copy())
    touched = np.flatnonzero(state.state.any(axis=1))
    return PortableCube(state.spec, touched, state.state[touched])


def from_portable(kept: PortableCube, spec: CubeSpec, labelled: Collection[str]) -> PartCube | None:
    """The kept state laid out in ``spec``; None when it cannot be, exactly."""
    if kept.spec == spec:
        return restore(spec, kept.cells, kept.rows)
    kept = dataclasses.replace(kept, spec=_interned(kept.spec))
    maps = code_maps(kept.spec, spec, labelled)
    if maps is None:
        return None
    mover = _Mover(kept, spec, maps, {i for i, d in enumerate(spec.dims) if d.name in labelled})
    cells, rows = [], []
    for table in spec.tables:
        moved = mover.move(table)
        if moved is None:
            return None
        cells.append(moved[0])
        rows.append(kept.rows[moved[1]])
    return restore(spec, np.concatenate(cells), np.concatenate(rows))


@functools.lru_cache(maxsize=16)
def _interned(spec: CubeSpec) -> CubeSpec:
    """One instance per stored spec: its tables are laid out once, not once per part (each
    entry unpickles its own copy)."""
    return spec


def code_maps(old: CubeSpec, new: CubeSpec, labelled: Collection[str]) -> list[np.ndarray] | None:
    """Per dimension, each stored code's code in ``new`` (-1: its label is absent there); None
    when the specs differ otherwise (another dimension, order or size)."""
    if (old.block_cap, old.max_order, old.token_dims) != (new.block_cap, new.max_order,
                                                          new.token_dims):  # fmt: skip
        return None
    if [d.name for d in old.seq_dims] != [d.name for d in new.seq_dims]:
        return None
    out = []
    for a, b in zip(old.dims, new.dims, strict=True):
        if a.name not in labelled:
            if a != b:
                return None
            out.append(np.arange(a.size))
            continue
        where = {label: k for k, label in enumerate(b.labels)}
        out.append(np.array([where.get(label, -1) for label in a.labels], dtype=np.int64))
    return out


class _Mover:
    """Moves the kept cells table by table: the cells sorted once (a table's are a slice of
    them), each labelled dimension's coordinate map made once per kind of coordinate."""

    def __init__(
        self, kept: PortableCube, spec: CubeSpec, maps: list[np.ndarray], labelled: set[int]
    ) -> None:
        self.old, self.spec, self.maps, self.labelled = kept.spec, spec, maps, labelled
        self.order = np.argsort(kept.cells, kind="stable")
        self.cells = kept.cells[self.order]
        self._luts: dict[tuple[int, bool, bool], np.ndarray | None] = {}

    def within(self, table: Table) -> tuple[np.ndarray, np.ndarray]:
        """The kept cells of a stored ``table`` (local indices) and their rows."""
        lo, hi = np.searchsorted(self.cells, (table.offset, table.offset + table.cells))
        return self.cells[lo:hi] - table.offset, self.order[lo:hi]

    def move(self, table: Table) -> tuple[np.ndarray, np.ndarray] | None:
        """The current ``table``'s cells of the kept state (from the stored table of the same
        dimensions, the exact one of a single blocked dimension) and the rows they come
        from; None when two would land in one (another order of additions) or one nowhere."""
        source = self.old.tables[self.old.table_index(table.dims, exact=len(table.dims) == 1)]  # type: ignore[index]
        local, rows = self.within(source)
        if not table.dims:  # the empty conjunction: one cell
            return np.full(len(rows), table.offset, dtype=np.int64), rows
        coords = np.unravel_index(local, source.shape)
        moved = []
        for axis, d in enumerate(table.dims):
            if d not in self.labelled:  # the same codes, the same blocks
                moved.append(coords[axis])
                continue
            lut = self.lut(d, source.blocked[axis], table.blocked[axis])
            to = None if lut is None else lut[coords[axis]]
            if to is None or (len(to) and to.min() < 0):
                return None
            moved.append(to)
        new = np.ravel_multi_index(tuple(moved), table.shape)
        if len(np.unique(new)) != len(new):
            return None
        return table.offset + np.asarray(new, dtype=np.int64), rows

    def lut(self, d: int, was_blocked: bool, is_blocked: bool) -> np.ndarray | None:
        key = (d, was_blocked, is_blocked)
        if key not in self._luts:
            self._luts[key] = self._coordinates(d, was_blocked, is_blocked)
        return self._luts[key]

    def _coordinates(self, d: int, was_blocked: bool, is_blocked: bool) -> np.ndarray | None:
        """Each stored coordinate of dimension ``d`` (a code or a block) mapped to the current
        table's (a code or a block), -1 where the part has none; None when a stored block
        holds part values that land in two places, or the values' order changes."""
        codes = self.maps[d]
        new_coord = self.spec.block_of(d)[np.maximum(codes, 0)] if is_blocked else codes
        new_coord = np.where(codes < 0, -1, new_coord)
        exact = self.old.tables[self.old.table_index((d,), exact=True)]  # type: ignore[index]
        present = np.sort(self.within(exact)[0])  # the codes the part has tokens in
        if np.any(codes[present] < 0) or np.any(np.diff(codes[present]) <= 0):
            return None
        if not was_blocked:
            return new_coord
        lut = np.full(self.old.block_cap, -1, dtype=np.int64)
        blocks, values = self.old.block_of(d)[present], new_coord[present]
        lut[blocks] = values
        return lut if np.array_equal(lut[blocks], values) else None  # one place per block


def sequence_codes(
    cells: SequenceCells, maps: list[np.ndarray], n_seq_dims: int
) -> SequenceCells | None:
    """A part's sequences' cells with their sequence codes mapped (None: a code's label is
    absent from the current spec)."""
    columns = [maps[d][cells.seq_codes[:, d]] for d in range(n_seq_dims)]
    codes = np.stack(columns, axis=1) if columns else cells.seq_codes
    if codes.size and codes.min() < 0:
        return None
    return SequenceCells(
        cells.keys,
        codes.astype(cells.seq_codes.dtype),
        cells.ptr,
        cells.combo,
        cells.tokens,
        cells.k3,
    )
