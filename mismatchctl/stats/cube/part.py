"""One part's K3 cube, sparse: only the cells its sequences touch, for the engine's per-part
states (``analysis/explain.py``'s extras).

A cube's dense state holds every cell of every table (27 MB at a few hundred steps: the tables
with a step hold ``block_cap`` blocks of steps). The engine gives every part its own state and
folds the parts' states into the total in part order; a part of one step touches a small share
of the cells (its step's block of each table with a step), so a dense state per part cost an
allocation and an addition of the whole state per part: with a part per step, the read's cost
grew with the number of steps. A :class:`PartCube` holds a row per cell it touches, in the order
first touched (``cube_kernels.cube_accumulate``'s sparse mode: the same additions in the same
order as into a dense state), and :meth:`fold_into` adds those rows to the total's cells: the
total is bit for bit the dense fold's (each cell gets ``total + part``, a cell the part does not
touch gets nothing, where the dense fold added 0).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

import numpy as np

from mismatchctl.stats.cube.cells import SequenceCells
from mismatchctl.stats.cube.cube import N_FIELDS, Cube, add_tokens
from mismatchctl.stats.cube.spec import CubeSpec

FIRST_ROWS = 1 << 14  # rows of a new part (1.3 MB), doubled as the part touches more cells


class PartCube:
    """The cells a part's sequences touch: ``rows[k]`` is cell ``cells[k]``'s (the ten
    ``Field`` sums), ``used`` rows in use; ``slot`` maps a cell to its row (-1: none yet)."""

    __slots__ = ("cells", "counts", "rows", "slot", "spec")

    def __init__(self, spec: CubeSpec) -> None:
        self.spec = spec
        first = min(FIRST_ROWS, spec.n_cells)
        self.rows = np.zeros((first, N_FIELDS), np.float64)
        self.cells = np.zeros(first, np.int64)
        self.slot = np.full(spec.n_cells, -1, np.int32)
        self.counts = np.zeros(1, np.int64)  # rows used

    @property
    def used(self) -> int:
        return int(self.counts[0])

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes + self.cells.nbytes + self.slot.nbytes)

    def add(
        self,
        lr: np.ndarray,
        lt: np.ndarray,
        seq: np.ndarray,
        token_codes: np.ndarray,
        seq_codes: np.ndarray,
        seq_keys: np.ndarray | None = None,
        keep: np.ndarray | None = None,
        bit: int = 1,
        k3: np.ndarray | None = None,
    ) -> SequenceCells | None:
        """:meth:`Cube.add`, into the touched cells' rows (more rows when a sequence may touch
        more cells than are left)."""
        from mismatchctl.stats.cube import kernels as cube_kernels  # numba: compiled on first use

        def sparse(
            lr: np.ndarray,
            lt: np.ndarray,
            starts: np.ndarray,
            rows: np.ndarray,
            order: np.ndarray,
            *rest: object,
        ) -> None:
            first, n = 0, len(rows)
            while True:
                first = cube_kernels.cube_accumulate(
                    self.rows, lr, lt, starts, rows, order, first, *rest, self.slot, self.cells,
                    self.counts,
                )  # fmt: skip
                if first == n:
                    return
                self._grow()

        return add_tokens(
            self.spec, sparse, lr, lt, seq, token_codes, seq_codes, seq_keys, keep, bit, k3
        )

    def _grow(self) -> None:
        """Twice the rows (at most a row per cell of the cube)."""
        size = min(2 * len(self.rows), self.spec.n_cells)
        rows = np.zeros((size, N_FIELDS), np.float64)
        cells = np.zeros(size, np.int64)
        rows[: self.used], cells[: self.used] = self.rows[: self.used], self.cells[: self.used]
        self.rows, self.cells = rows, cells

    def fold_into(self, total: Cube) -> Cube:
        """``total`` with this part's cells added (in place when its state is writable)."""
        if total.spec != self.spec:
            raise ValueError("cubes of different dimensions cannot be merged")
        if not total.state.flags.writeable:
            total = Cube(self.spec, total.state.copy())
        used = self.used
        total.state[self.cells[:used]] += self.rows[:used]
        return total

    def dense(self) -> Cube:
        """The part as a cube."""
        return self.fold_into(Cube(self.spec))

    def __reduce__(self) -> tuple:
        """Only the used rows travel (a Ray task's result)."""
        used = self.used
        return restore, (self.spec, self.cells[:used].copy(), self.rows[:used].copy())


def restore(spec: CubeSpec, cells: np.ndarray, rows: np.ndarray) -> PartCube:
    """A part of ``spec`` holding ``rows`` in ``cells`` (distinct cells)."""
    part = PartCube.__new__(PartCube)
    part.spec, part.rows, part.cells = spec, rows, cells
    part.slot = np.full(spec.n_cells, -1, np.int32)
    part.slot[cells] = np.arange(len(cells), dtype=np.int32)
    part.counts = np.array([len(cells)], np.int64)
    return part


class PartStates:
    """New part states for an engine's extra: the first asked for each key (a run, or the one
    selection) is a dense :class:`Cube`, which the fold makes the total; every other a
    :class:`PartCube`. A selection of one part so leaves a dense cube, as before."""

    def __init__(self, spec: CubeSpec) -> None:
        self.spec = spec
        self._given: set[Hashable] = set()
        self._lock = threading.Lock()  # worker threads start parts concurrently

    def new(self, key: Hashable = None) -> Cube | PartCube:
        return Cube(self.spec) if self.first(key) else PartCube(self.spec)

    def first(self, key: Hashable = None) -> bool:
        """Whether no state was given for ``key`` yet (it is now): the first is dense."""
        with self._lock:
            first = key not in self._given
            self._given.add(key)
        return first

    def __getstate__(self) -> dict:
        """Sent to a Ray task without the lock (each task's copy starts afresh: its parts'
        states dense, as before)."""
        return {"spec": self.spec}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["spec"])  # type: ignore[misc]


def fold(total: Cube | PartCube, part: Cube | PartCube) -> Cube:
    """The merge of two states of the engine's fold (``total`` first in part order): the total
    is dense once two parts are folded; a part's rows are added to the total's cells."""
    if isinstance(total, PartCube):
        total = total.dense()
    if isinstance(part, PartCube):
        return part.fold_into(total)
    return total.merge_into(part)


def as_cube(state: Cube | PartCube) -> Cube:
    """A state of the fold as a dense cube (a selection of one part leaves a part's)."""
    return state.dense() if isinstance(state, PartCube) else state
