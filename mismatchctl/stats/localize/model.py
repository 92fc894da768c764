"""The search's model mass of every table, explained away lazily (``localize.search``).

Explaining a finding away grows every table's model by ``(S - 1)`` times its overlap with the
finding (``tables.overlap``), computed from the model as it was before. A round reads some of
the tables (the backfit's moves about a dozen of some 200), so each update is recorded and a
table is brought up to date when it is read: update ``i`` of a table takes its overlap from the
tables at version ``i - 1``, which are brought there first (some versions kept: ``KEEP_EVERY``).
The arithmetic is the eager update's, on the same arrays, in the same order: the same bits.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from mismatchctl.stats.localize.tables import Dims, Masks, SideTables, overlap

# A table keeps its versions that are multiples of this, and its latest: a table behind reads
# the others as they were, which each then makes again from its checkpoint before (a few updates;
# the overlaps' sums from the other tables are kept with each update). Measured on a cube of
# 1,000 steps (27 updates): every version kept, 42 MB of tables (the localization's peak 76 MB,
# 36 when every table was updated at once); every 4th, a peak of 49 MB for 11% more overlaps
# (every 2nd 58 MB and 3%; every 8th 47 MB and slower; only the first and the latest 45 MB and
# about 1.5x the time).
KEEP_EVERY = 4


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

    def items(self) -> list[tuple[Dims, np.ndarray]]:
        """Every table at the latest version (each brought up to date: a read of them all)."""
        return [(dims, self[dims]) for dims in self._arrays]

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
        if version > known:  # the versions between checkpoints go (made again if read)
            latest = versions[-1]
            for v in [v for v in versions if v % KEEP_EVERY and v != latest]:
                versions.remove(v)
                del arrays[v]
        return arr

    def kept(self, dims: Dims) -> list[int]:
        """The versions of table ``dims`` held (ascending)."""
        return list(self._versions[dims])


class _At:
    """The model as it was after ``version`` updates, read the way ``overlap`` reads it."""

    def __init__(self, model: LazyModel, version: int) -> None:
        self._model, self._version = model, version

    def __getitem__(self, dims: Dims) -> np.ndarray:
        return self._model.at(dims, self._version)
