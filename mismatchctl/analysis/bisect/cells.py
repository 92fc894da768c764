"""The hot cells ``bisect`` samples by: the top findings of ``explain`` on the run (its
localization, in the run's own cube), or one cell given by hand (``--cell KEY=VALUE``, the
``--where`` grammar of ``tokens``: every condition holds). Two reads of the run find their
tokens: the first, which cells each sequence has a model token in (the strata of the sample);
the second, after the draw, the positions of the sampled sequences' tokens in each cell."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.analysis.bins import parse_edges
from mismatchctl.analysis.explain import (
    _Coder,
    cube_keys,
    cube_spec,
    explain_selections,
    twin_columns,
)
from mismatchctl.analysis.selection import reading, resolve_text
from mismatchctl.analysis.selectors import StepRange, selector_text
from mismatchctl.analysis.where import Condition, cell_mask, parse_where, where_keys
from mismatchctl.engines.choice import LOCAL_ENGINE
from mismatchctl.engines.keys import PartKeys
from mismatchctl.engines.plan import Selection
from mismatchctl.parallel import DEFAULT_WORKERS
from mismatchctl.stats.cube.spec import CubeSpec
from mismatchctl.stats.localize.result import Region, where_text
from mismatchctl.store import Store

HOT_CELLS = 3  # explain's top findings taken as cells


@dataclass(frozen=True)
class Cell:
    """A cell: its label, where it comes from (``explain``, ``given``), and how its tokens are
    known: a region of the run's cube (explain's) or ``--cell`` conditions."""

    label: str
    source: str
    region: Region | None = None
    conditions: tuple[Condition, ...] = ()


@dataclass
class HotCells:
    """The cells, the selection they were found in, the cube they are regions of, and why
    there are none (explain located no cell)."""

    cells: list[Cell]
    selection: Selection
    spec: CubeSpec | None = None
    why_none: str | None = None
    found: list[str] = field(default_factory=list)  # explain's sentences of the cells


def hot_cells(
    store: Store, run: str, steps: StepRange | None, given: Sequence[str] = ()
) -> HotCells:
    """The cells: ``given`` (``--cell`` conditions, one cell), else explain's top findings."""
    sel = resolve_text(store, selector_text(run, steps=steps))
    edges = parse_edges("log")
    if given:
        conditions = tuple(parse_where(given, edges))
        label = ", ".join(str(c) for c in conditions)
        return HotCells([Cell(label, "given", conditions=conditions)], sel)
    found = explain_selections(sel, [], run, None, bootstrap_intervals=False,
                               workers=DEFAULT_WORKERS)  # fmt: skip
    findings = found.explanation.findings[:HOT_CELLS]
    if not findings:
        return HotCells([], sel, why_none=f"explain located no hot cell in `{run}`: a uniform "
                        "sample")  # fmt: skip
    with reading(sel):
        spec = cube_spec([sel], edges, routing=True)  # explain's, for the findings' regions
    cells = [Cell(where_text(f.named or f.where), "explain", region=f.region) for f in findings]
    return HotCells(cells, sel, spec, found=[f.sentence for f in findings])


class CellTokens:
    """The engine's ``PartExtra``: per sequence, the cells it has a model token in (a bit per
    cell), or, for the sequences ``wanted``, the positions of its tokens in each cell."""

    columns: tuple[str, ...] = (S.GPU, S.POSITION)

    def __init__(self, hot: HotCells, wanted: set[int] | None = None) -> None:
        self.hot, self.wanted = hot, wanted
        self.coder = _Coder(hot.spec) if hot.spec is not None else None
        conditions = [c for cell in hot.cells for c in cell.conditions]
        cube = cube_keys(hot.spec) if hot.spec is not None else ()
        self.keys: tuple[str, ...] = tuple(dict.fromkeys((*cube, *where_keys(conditions))))
        names = [d.name for d in hot.spec.dims] if hot.spec is not None else []
        self.routing_columns = twin_columns(names)

    def compute(self, table: pa.Table, keys: PartKeys) -> dict[int, Any]:
        seq = keys.column(S.SEQ)
        inside = self._inside(table, keys)  # [cells, tokens]
        out: dict[int, Any] = {}
        if self.wanted is None:
            bits = (inside * (1 << np.arange(len(inside)))[:, None]).sum(axis=0)
            for s in np.unique(seq[bits > 0]).tolist():
                out[int(s)] = int(np.bitwise_or.reduce(bits[seq == s]))
            return out
        position = keys.column(S.POSITION)
        for s in set(np.unique(seq).tolist()) & self.wanted:
            rows = seq == s
            out[int(s)] = [position[rows & cell] for cell in inside]
        return out

    def _inside(self, table: pa.Table, keys: PartKeys) -> np.ndarray:
        out = np.zeros((len(self.hot.cells), keys.n), dtype=bool)
        codes = self.coder.slice(table, keys) if self.coder is not None else None
        for i, cell in enumerate(self.hot.cells):
            if cell.region is not None and codes is not None:
                out[i] = _in_region(cell.region, self.hot.spec, codes)
            else:
                mask = cell_mask(list(cell.conditions), keys)
                out[i] = True if mask is None else mask
        return out

    def merge(self, a: dict[int, Any], b: dict[int, Any]) -> dict[int, Any]:
        return {**a, **b}  # a sequence never spans two parts


def _in_region(region: Region, spec: CubeSpec | None, codes: tuple[np.ndarray, ...]) -> np.ndarray:
    """The slice's tokens inside a region of the cube (dimension index -> its codes; the
    sequence dimensions first, then the token dimensions)."""
    assert spec is not None
    _, _, rows, tok, seqc, _ = codes
    n_seq = len(spec.seq_dims)
    inside = np.ones(len(rows), dtype=bool)
    for dim, values in region.items():
        code = seqc[rows, dim] if dim < n_seq else tok[:, dim - n_seq]
        inside &= np.isin(code, np.asarray(values))
    return inside


def read_cells(hot: HotCells, wanted: set[int] | None = None) -> dict[int, Any]:
    """One read of the run: ``CellTokens`` of every sequence (those ``wanted``)."""
    if not hot.cells:
        return {}
    extra = CellTokens(hot, wanted)
    sel = hot.selection
    with reading(sel):
        _, states = LOCAL_ENGINE.runner()(
            sel.tasks, [], parse_edges("log"), sel.rows, DEFAULT_WORKERS, None, [extra]
        )
    return states[0] or {}
