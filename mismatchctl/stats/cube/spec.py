"""The dimensions of a K3 cube and the layout of its tables (``stats/cube.py`` holds the state).

A cube holds one table per conjunction of 0 to 3 dimensions (every subset of at most three of
the dimensions), each table over the product of its dimensions' values. Dimensions come in two
kinds: *token* dimensions vary inside a sequence (turn, probability bin, KV position bin...),
*sequence* dimensions are constant along it (run, step, gpu, tags...). Codes are small ints
``0..size-1`` given by the caller, with a label per code. The global order of the dimensions is
the sequence dimensions, then the token dimensions, and a table's cells are laid out in that
order (C order): the cells one sequence adds to a table lie in one contiguous block of it (its
sequence codes fixed, its token codes varying fastest), and sequences of one step hit the same
blocks, which keeps the per-sequence additions in cache.

High-cardinality dimensions (``step`` can have thousands of values) are seen in *blocks* inside
every table of the search: a dimension with more than ``block_cap`` values is cut into
``block_cap`` runs of consecutive codes (``code * block_cap // size``: blocks differ in size by
at most one value), so no table grows with the number of steps beyond ``block_cap``. Its exact
values keep one extra 1-d table (``exact=True``), for per-value marginals such as the mix/rate
decomposition. A dimension declared ``function_of`` another (``turn_kind`` of ``turn``) is never
conjoined with it: every such cell would repeat a cell of the finer dimension or be empty.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np

MAX_ORDER = 3  # conjunctions of up to three dimension values
DEFAULT_BLOCK_CAP = 128  # values of one dimension inside a table (see the module docstring)


@dataclass(frozen=True)
class Dim:
    """One dimension: ``size`` codes ``0..size-1`` with their ``labels`` (default: the codes).

    ``ordered``: codes follow a natural order (steps, position bins), so runs of consecutive
    codes are reported as ranges (``1024-4095``); unordered values (gpus) as lists.
    ``function_of``: the name of a dimension this one is a function of (never conjoined with it);
    ``function_map``: this dimension's code for each code of that one, when known (a region on
    this dimension is then a region on that one: ``localize_tables.on_parents``).
    """

    name: str
    size: int
    labels: tuple[str, ...] = ()
    ordered: bool = True
    function_of: str | None = None
    function_map: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(
                f"dimension {self.name!r}: size must be at least 1 (found {self.size})"
            )
        if self.labels and len(self.labels) != self.size:
            raise ValueError(
                f"dimension {self.name!r}: {len(self.labels)} labels for {self.size} codes"
            )
        if not self.labels:
            object.__setattr__(self, "labels", tuple(str(k) for k in range(self.size)))
        if self.function_map and (self.function_of is None or max(self.function_map) >= self.size):
            raise ValueError(
                f"dimension {self.name!r}: function_map needs function_of and codes below "
                f"{self.size} (found {self.function_map})"
            )


class Table(NamedTuple):
    """One table of the cube: its dimensions (indices into ``CubeSpec.dims``, ascending), whether
    each is seen in blocks, its shape (values, or blocks, per dimension) and where its cells
    start in the state."""

    dims: tuple[int, ...]
    blocked: tuple[bool, ...]
    shape: tuple[int, ...]
    offset: int

    @property
    def cells(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class CubeSpec:
    """The dimensions of a cube; their global order is ``seq_dims`` then ``token_dims``."""

    token_dims: tuple[Dim, ...]
    seq_dims: tuple[Dim, ...]
    block_cap: int = DEFAULT_BLOCK_CAP
    max_order: int = MAX_ORDER
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "token_dims", tuple(self.token_dims))
        object.__setattr__(self, "seq_dims", tuple(self.seq_dims))
        names = [d.name for d in self.dims]
        if len(set(names)) != len(names):
            raise ValueError(f"dimension names must be unique (found {names})")
        if not 1 <= self.max_order <= MAX_ORDER:
            raise ValueError(f"max_order must lie in 1..{MAX_ORDER} (found {self.max_order})")
        if self.block_cap < 1:
            raise ValueError(f"block_cap must be at least 1 (found {self.block_cap})")
        for d in self.dims:
            if d.function_of is not None and d.function_of not in names:
                raise ValueError(f"dimension {d.name!r}: function_of {d.function_of!r} is unknown")
        object.__setattr__(self, "_index", {n: i for i, n in enumerate(names)})

    @cached_property
    def dims(self) -> tuple[Dim, ...]:
        return self.seq_dims + self.token_dims

    @property
    def n_token_dims(self) -> int:
        return len(self.token_dims)

    @property
    def n_seq_dims(self) -> int:
        return len(self.seq_dims)

    def is_token_dim(self, d: int) -> bool:
        return d >= len(self.seq_dims)

    def index(self, name: str | int) -> int:
        """Global index of a dimension given by name (or index)."""
        if isinstance(name, int):
            return name
        if name not in self._index:
            raise KeyError(f"no dimension {name!r} (dimensions: {', '.join(self._index)})")
        return self._index[name]

    def blocked(self, d: int) -> bool:
        """Whether dimension ``d`` is seen in blocks inside the search tables."""
        return self._levels[d][1]

    def levels(self, d: int) -> int:
        """Number of values (or blocks) of dimension ``d`` in the search tables."""
        return self._levels[d][0]

    @cached_property
    def _levels(self) -> tuple[tuple[int, bool], ...]:
        """Per dimension, its levels in the search tables and whether they are blocks (asked
        for at every step of the search)."""
        out = []
        for dim in self.dims:
            blocked = dim.size > self.block_cap
            out.append((self.block_cap if blocked else dim.size, blocked))
        return tuple(out)

    def block_of(self, d: int) -> np.ndarray:
        """The block (search-level code) of every code of dimension ``d``."""
        size = self.dims[d].size
        codes = np.arange(size, dtype=np.int64)
        return codes * self.block_cap // size if self.blocked(d) else codes

    def members(self, d: int, level: int) -> np.ndarray:
        """The codes of dimension ``d`` inside search-level value ``level``."""
        return np.flatnonzero(self.block_of(d) == level)

    def level_label(self, d: int, levels: list[int] | np.ndarray) -> str:
        """Label of a set of search-level values of ``d`` (ranges for ordered dimensions)."""
        return codes_label(self.dims[d], self.codes_of(d, levels))

    def codes_of(self, d: int, levels: list[int] | np.ndarray) -> np.ndarray:
        """The codes of ``d`` inside a set of its search-level values."""
        if not len(levels):
            return np.zeros(0, np.int64)
        return np.unique(np.concatenate([self.members(d, int(v)) for v in levels]))

    @cached_property
    def tables(self) -> tuple[Table, ...]:
        """Every table: the empty conjunction, the search tables of 1..max_order dimensions, then
        the exact 1-d tables of the blocked dimensions."""
        out: list[Table] = []
        offset = 0
        for order in range(self.max_order + 1):
            for dims in itertools.combinations(range(len(self.dims)), order):
                if self._conjoinable(dims):
                    table = self._table(dims, tuple(self.blocked(d) for d in dims), offset)
                    out.append(table)
                    offset += table.cells
        for d in range(len(self.dims)):
            if self.blocked(d):
                table = self._table((d,), (False,), offset)
                out.append(table)
                offset += table.cells
        return tuple(out)

    def _table(self, dims: tuple[int, ...], blocked: tuple[bool, ...], offset: int) -> Table:
        shape = tuple(
            self.block_cap if b else self.dims[d].size for d, b in zip(dims, blocked, strict=True)
        )
        return Table(dims, blocked, shape, offset)

    def _conjoinable(self, dims: tuple[int, ...]) -> bool:
        names = {self.dims[d].name for d in dims}
        return not any(self.dims[d].function_of in names for d in dims)

    @cached_property
    def _table_index(self) -> dict[tuple[tuple[int, ...], bool], int]:
        out = {}
        for i, t in enumerate(self.tables):
            exact = len(t.dims) == 1 and self.blocked(t.dims[0]) and not t.blocked[0]
            out[(t.dims, exact)] = i
        return out

    def table_index(self, dims: tuple[int, ...] | list[int], exact: bool = False) -> int | None:
        """Index of the table of ``dims`` (any order), None when the cube has none (more than
        ``max_order`` dimensions, or a dimension with one it is a function of). ``exact``: the
        exact 1-d table of a blocked dimension."""
        key = tuple(sorted(int(d) for d in dims))
        if exact and not (len(key) == 1 and self.blocked(key[0])):
            exact = False  # an unblocked dimension's table is exact already
        return self._table_index.get((key, exact))

    @property
    def n_cells(self) -> int:
        last = self.tables[-1]
        return last.offset + last.cells


_INT = re.compile(r"^-?\d+$")
_RANGE = re.compile(r"^(-?\d+)-(-?\d+)$")
_OPEN = re.compile(r"^-?\d+\+$")


def codes_label(dim: Dim, codes: np.ndarray | list[int]) -> str:
    """Label of a set of codes: a single label, ranges of consecutive codes of an ordered
    dimension (``2-3,6``; integer-range labels such as ``1024-2047`` and ``2048-4095`` join as
    ``1024-4095``, a range up to an open last value ``3+`` as ``1+``), or the labels joined by
    commas."""
    codes = sorted(int(c) for c in codes)
    if not dim.ordered:
        return ",".join(dim.labels[c] for c in codes)
    runs: list[tuple[int, int]] = []
    for c in codes:
        if runs and c == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], c)
        else:
            runs.append((c, c))
    return ",".join(run_label(dim, a, b) for a, b in runs)


def run_label(dim: Dim, a: int, b: int) -> str:
    """Label of the consecutive codes ``a..b`` of an ordered dimension."""
    first, last = dim.labels[a], dim.labels[b]
    if a == b:
        return first
    lo, hi = _bounds(first), _bounds(last)
    if lo is not None and hi is not None:
        return f"{lo[0]}-{hi[1]}"
    if lo is not None and b == dim.size - 1 and _OPEN.match(last):
        return f"{lo[0]}+"  # up to an open last value (``3+``, ``131072+``)
    return f"{first}..{last}"


def _bounds(label: str) -> tuple[str, str] | None:
    if _INT.match(label):
        return label, label
    m = _RANGE.match(label)
    return (m.group(1), m.group(2)) if m else None
