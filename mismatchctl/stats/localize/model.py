"""The search's model mass of every table, explained away lazily (``localize.search``).

Explaining a finding away grows every table's model by ``(S - 1)`` times its overlap with the
finding (``tables.overlap``), computed from the model as it was before. A round reads some of
the tables (the backfit's moves about a dozen of some 200), so each update is recorded and a
table is brought up to date when it is read: update ``i`` of a table takes its overlap from the
tables at version ``i - 1``, which are brought there first (kept by version, so a table read
later in an older version is not computed twice). The arithmetic is the eager update's, on the
same arrays, in the same order: the same bits.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from mismatchctl.stats.localize.tables import Dims, Masks, SideTables, overlap


@dataclass
class _Update:
    region: Masks
    factor: float
    memo: dict[tuple, np.ndarray] = field(default_factory=dict)  # ``overlap``'s, shared by tables


class LazyModel:
    """A mapping of table dimensions to model arrays at the latest version (``version``: the
    updates recorded), computed when read."""

    def __init__(self, side: SideTables, start: dict[Dims, np.ndarray]) -> None:
        self._side = side
        self._updates: list[_Update] = []
        # each table's computed versions (ascending) and their arrays
        self._versions: dict[Dims, list[int]] = {d: [0] for d in start}
        self._arrays: dict[Dims, dict[int, np.ndarray]] = {d: {0: a} for d, a in start.items()}

    @property
    def version(self) -> int:
        return len(self._updates)

    def __getitem__(self, dims: Dims) -> np.ndarray:
        return self.at(dims, self.version)

    def __contains__(self, dims: object) -> bool:
        return dims in self._arrays

    def explain_away(self, region: Masks, factor: float) -> None:
        """Record that every table grows by ``factor - 1`` times its overlap with ``region``."""
        self._updates.append(_Update(region, factor))

    def at(self, dims: Dims, version: int) -> np.ndarray:
        """Table ``dims`` after the first ``version`` updates."""
        versions, arrays = self._versions[dims], self._arrays[dims]
        known = versions[bisect.bisect_right(versions, version) - 1]
        arr = arrays[known]
        for i in range(known, version):
            up = self._updates[i]
            extra = overlap(self._side, _At(self, i), up.region, dims, up.memo)
            arr = arr + (up.factor - 1.0) * extra
            bisect.insort(versions, i + 1)
            arrays[i + 1] = arr
        return arr


class _At:
    """The model as it was after ``version`` updates, read the way ``overlap`` reads it."""

    def __init__(self, model: LazyModel, version: int) -> None:
        self._model, self._version = model, version

    def __getitem__(self, dims: Dims) -> np.ndarray:
        return self._model.at(dims, self._version)
