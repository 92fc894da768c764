"""`explain`: where the mismatch of a selection lives, against a baseline or within itself.

The selection (and the baseline) are read once by the engine into a K3 cube (``stats/cube.py``:
every conjunction of up to three dimensions), the search runs on the cube's cell aggregates
(``stats/localize.py``), and the sequence bootstrap of the findings' intervals
(``stats/cube_bootstrap.py``) sums the sequences' cells that the same read kept
(``stats/cube_cells.py``). docs/explain.md describes the algorithm and every constant.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.analysis.bins import parse_edges
from mismatchctl.analysis.explain_length import (
    BASELINE,
    TARGET,
    SeqSumsExtra,
    SideScaling,
    side_scaling,
)
from mismatchctl.analysis.report.figure_data import RatePlot
from mismatchctl.analysis.routing.kinds import FLIPPED, SAME, UNPAIRED
from mismatchctl.analysis.routing.routing import route_layers
from mismatchctl.analysis.selection import reading, resolve_text, same_selection
from mismatchctl.engines import plan as K
from mismatchctl.engines.choice import LOCAL_ENGINE, Engine
from mismatchctl.engines.keys import PartKeys
from mismatchctl.engines.plan import Selection
from mismatchctl.errors import UsageError
from mismatchctl.parallel import DEFAULT_WORKERS
from mismatchctl.stats import TURN_INDEX_LABELS, TURN_KIND_LABELS, bin_label, turn_kind
from mismatchctl.stats.cube.bootstrap import (
    FindingInterval,
    RegionAccumulator,
    finalize,
    plan_bootstrap,
    sequence_keys,
)
from mismatchctl.stats.cube.cells import SequenceCells
from mismatchctl.stats.cube.cube import Cube, Field, merge_all
from mismatchctl.stats.cube.part import PartCube, PartStates, as_cube, fold
from mismatchctl.stats.cube.portable import (
    PortableCube,
    code_maps,
    from_portable,
    sequence_codes,
    to_portable,
)
from mismatchctl.stats.cube.spec import CubeSpec, Dim, run_label
from mismatchctl.stats.entropy_bins import entropy_label, entropy_labels
from mismatchctl.stats.localize.explain import explain as localize
from mismatchctl.stats.localize.result import Explanation
from mismatchctl.stats.positions import (
    ORDER_BLOCK,
    ORDER_BLOCKS,
    assign_positions,
    order_blocks,
)
from mismatchctl.stats.seq_sums import SeqSums
from mismatchctl.store import Store

NONE_LABEL = "(none)"
# Token dimensions of the cube (vary inside a sequence) and sequence dimensions (constant on it).
TOKEN_DIMS = (K.TURN, K.TURN_KIND, K.BIN, K.KV_POSITION, K.TURN_POSITION)
# the turn kind of each turn code (0, 1, 2, 3+): a turn-kind region is a turn region
KIND_OF_TURN = tuple(int(k) for k in turn_kind(np.arange(len(TURN_INDEX_LABELS))))
SEQ_DIMS = (K.RUN, K.STEP, K.GPU, K.LENGTH, K.DUMP_ORDER)
# the dimensions whose labels follow the selections (cube_spec): the part cache keeps a part's
# cube by these labels, so that its state outlives a new step, gpu or baseline run
LABELLED = (K.RUN, K.STEP, K.GPU)
# The cube's own bins of the position dimensions (coarser than the report's --position-bins, so
# that every conjunction of three stays small; docs/explain.md "The K3 cube"):
CUBE_KV_EDGES = (0, *(1 << k for k in range(4, 18)))  # 0-15, 16-31, ..., 131072+
CUBE_TURN_POSITION_EDGES = (0, 16, 64, 256, 1024)  # the first 16 tokens of a turn, ...
CUBE_LENGTH_EDGES = (0, *(1 << k for k in range(5, 17)))  # 0-31, 32-63, ..., 65536+
CUBE_ORDER_GROUP = 4  # the order key's blocks of 32 sequences, 4 to a value: 128 sequences
ATTR_CUBE_DIMS = 4  # per-sequence attributes in the cube (the first by name that vary)
ATTR_CUBE_VALUES = 15  # an attribute's most frequent values kept apart; the rest are "(other)"
OTHER_LABEL = "(other)"
# MoE routing of each token's producing position (explain only: `routing_dims`)
ROUTING, FIRST_FLIP_LAYER = "routing", "first_flip_layer"
ROUTING_LABELS = (FLIPPED, SAME, UNPAIRED, NONE_LABEL)
CUBE_EDGES = {
    K.KV_POSITION: CUBE_KV_EDGES,
    K.TURN_POSITION: CUBE_TURN_POSITION_EDGES,
    K.LENGTH: CUBE_LENGTH_EDGES,
}


def range_labels(edges: Sequence[int]) -> tuple[str, ...]:
    """``0-15``, ``16-31``, ..., the last bin open (``131072+``)."""
    inner = [f"{a}-{b - 1}" if b - a > 1 else str(a) for a, b in itertools.pairwise(edges)]
    return (*inner, f"{edges[-1]}+")


def order_labels() -> tuple[str, ...]:
    size = ORDER_BLOCK * CUBE_ORDER_GROUP
    n = -(-ORDER_BLOCKS // CUBE_ORDER_GROUP)
    return (*(f"{k * size}-{(k + 1) * size - 1}" for k in range(n - 1)), f"{(n - 1) * size}+")


def cube_spec(
    selections: Sequence[Selection],
    edges: np.ndarray,
    *,
    with_run: bool = True,
    routing: bool = False,
) -> CubeSpec:
    """The dimensions of the cube shared by every side, labels from the selections' metadata
    (the union of their runs, steps and gpus), so that the sides' cubes merge and compare;
    ``with_run`` False: no run dimension (one cube per run, :class:`RunCubeExtra`);
    ``routing``: the MoE routing dimensions too, when every side has routes
    (``routing_dims``). The per-token entropy's bins are a dimension when a source of the
    selections has an entropy (``token_dims``). The trainer probability's bins are not: the
    search would find the mismatch in them by construction (a token whose trainer probability
    fell below its inference probability is hot because it fell), a consequence, not a place."""
    runs = sorted({r.name for sel in selections for r in sel.runs})
    steps = sorted({s for sel in selections for r in sel.runs for s in r.steps if _in(sel, s)})
    gpus = sorted({g for sel in selections for r in sel.runs for g in r.gpus})
    bins = tuple(bin_label(edges, k) for k in range(len(edges) - 1))
    kv, tpos = range_labels(CUBE_KV_EDGES), range_labels(CUBE_TURN_POSITION_EDGES)
    length, order = range_labels(CUBE_LENGTH_EDGES), order_labels()
    token = (
        Dim(K.TURN, len(TURN_INDEX_LABELS), TURN_INDEX_LABELS),
        Dim(
            K.TURN_KIND,
            len(TURN_KIND_LABELS),
            TURN_KIND_LABELS,
            function_of=K.TURN,
            function_map=KIND_OF_TURN,
        ),
        Dim(K.BIN, len(bins), bins),
        Dim(K.KV_POSITION, len(kv), kv),
        Dim(K.TURN_POSITION, len(tpos), tpos),
        *token_dims(selections),
        *(routing_dims(selections) if routing else ()),
    )
    run = (Dim(K.RUN, len(runs), tuple(runs), ordered=False),) if with_run else ()
    seq = (
        *run,
        Dim(K.STEP, max(1, len(steps)), tuple(str(s) for s in steps) or ("-",)),
        Dim(K.GPU, len(gpus) + 1, (*gpus, NONE_LABEL), ordered=False),
        Dim(K.LENGTH, len(length), length),
        Dim(K.DUMP_ORDER, len(order), order),
        *attribute_dims(selections),
    )
    return CubeSpec(token_dims=token, seq_dims=seq)


def token_dims(selections: Sequence[Selection]) -> tuple[Dim, ...]:
    """The entropy's bins, when a source of the selections has an entropy column (tokens
    without one are ``(none)``)."""
    sources = (src for sel in selections for r in sel.runs for src in r.sources)
    if not any(S.ROLE_ENTROPY in src.columns for src in sources):
        return ()
    labels = tuple(entropy_label(e) or NONE_LABEL for e in entropy_labels())
    return (Dim(K.ENTROPY, len(labels), labels),)


def routing_dims(selections: Sequence[Selection]) -> tuple[Dim, ...]:
    """The MoE routing of each token's producing position (docs/metrics.md, Routing), when
    every side has routes (a baseline without any has nothing to compare them with):
    ``first_flip_layer``, the lowest layer on which it differs (``0`` to ``L - 1``, ``same``,
    ``unpaired``, or ``(none)``: a source without routes), and ``routing`` (``flipped``,
    ``same``, ``unpaired``, ``(none)``), a function of it."""
    found = [route_layers([sel]) for sel in selections]
    layers = max(found, default=0)
    if not all(found) or not layers:
        return ()
    first = (*(str(x) for x in range(layers)), *ROUTING_LABELS[1:])
    return (
        Dim(FIRST_FLIP_LAYER, len(first), first, ordered=False),
        Dim(ROUTING, len(ROUTING_LABELS), ROUTING_LABELS, ordered=False,
            function_of=FIRST_FLIP_LAYER),
    )  # fmt: skip


def routing_codes(keys: PartKeys, name: str, layers: int) -> np.ndarray:
    """Each token's code of ``routing`` or ``first_flip_layer`` (``routing_dims``) from the
    slice's ``route_paired`` column (-1 unpaired, 0 same, 1 + the lowest differing layer), or
    ``(none)`` for a slice of a part without routes."""
    table = keys.table
    if S.ROUTE_PAIRED not in table.column_names:
        none = len(ROUTING_LABELS) - 1  # "(none)": the last label of either dimension
        return np.full(keys.n, none if name == ROUTING else layers + none - 1)
    paired = keys.column(S.ROUTE_PAIRED).astype(np.int32)
    kind = np.where(paired >= 1, 0, np.where(paired == 0, 1, 2))  # flipped, same, unpaired
    if name == ROUTING:
        return kind
    return np.where(kind == 0, paired - 1, layers + kind - 1)


def attribute_dims(selections: Sequence[Selection]) -> tuple[Dim, ...]:
    """The per-sequence attributes of the selections' sources as sequence dimensions: the first
    ``ATTR_CUBE_DIMS`` by name with more than one value, each with its ``ATTR_CUBE_VALUES`` most
    frequent values (the catalog's counts at ingest), ``(none)`` and ``(other)``."""
    counts: dict[str, Counter[str]] = {}
    more: set[str] = set()
    for sel in selections:
        for source in (src for r in sel.runs for src in r.sources):
            for name, info in (source.attributes or {}).items():
                found = counts.setdefault(name, Counter())
                for value, n in info["values"]:
                    found[NONE_LABEL if value in (None, "") else str(value)] += n
                if info.get("more") or info["distinct"] > len(info["values"]):
                    more.add(name)
    names = sorted(n for n, c in counts.items() if len(c) > 1 or n in more)[:ATTR_CUBE_DIMS]
    dims = []
    for name in names:
        top = sorted(counts[name].items(), key=lambda kv: (-kv[1], kv[0]))[:ATTR_CUBE_VALUES]
        labels = tuple(dict.fromkeys([*(v for v, _ in top), NONE_LABEL, OTHER_LABEL]))
        dims.append(Dim(K.ATTR_PREFIX + name, len(labels), labels, ordered=False))
    return tuple(dims)


def cube_keys(spec: CubeSpec) -> tuple[str, ...]:
    """What the engine loads for the coder: the position keys and the attributes."""
    attrs = tuple(d.name for d in spec.seq_dims if d.name.startswith(K.ATTR_PREFIX))
    return CUBE_KEYS + attrs


def _in(sel: Selection, step: int) -> bool:
    r = sel.rows.steps
    return r is None or ((r.lo is None or step >= r.lo) and (r.hi is None or step <= r.hi))


CUBE_KEYS = (K.KV_POSITION, K.LENGTH, K.DUMP_ORDER)  # what the engine loads for the coder
# token dimensions after TOKEN_DIMS, coded from the engine's keys per token
EXTRA_TOKEN_DIMS = frozenset({ROUTING, FIRST_FLIP_LAYER, K.ENTROPY})


def twin_columns(names: Sequence[str]) -> tuple[str, ...]:
    """The routing columns the coder reads for these dimensions (joined by the engine)."""
    return (S.ROUTE_PAIRED,) if ROUTING in names or FIRST_FLIP_LAYER in names else ()


class _Coder:
    """Per-slice codes of the cube's dimensions, from the engine's per-part keys (whose codes are
    local to a part: each is mapped to the cube's code of its label)."""

    def __init__(self, spec: CubeSpec) -> None:
        names = tuple(d.name for d in spec.token_dims)
        extra = names[len(TOKEN_DIMS) :]
        if names[: len(TOKEN_DIMS)] != TOKEN_DIMS or not set(extra) <= EXTRA_TOKEN_DIMS:
            raise ValueError(
                f"the coder codes the token dimensions {TOKEN_DIMS} of cube_spec, then the "
                f"routing ones (found {names})"
            )
        self.spec, self.routing = spec, extra
        self.maps = {d.name: {lab: i for i, lab in enumerate(d.labels)} for d in spec.dims}
        first = next((d for d in spec.dims if d.name == FIRST_FLIP_LAYER), None)
        self.layers = 0 if first is None else first.size - (len(ROUTING_LABELS) - 1)

    def _lut(self, name: str, labels: list[Any]) -> np.ndarray:
        if name in (K.BIN, K.ENTROPY):  # the engine's codes are the bins' indices, as the cube's
            return np.arange(len(labels), dtype=np.int32)
        found = self.maps[name]
        keys = [NONE_LABEL if v in (None, "") else str(v) for v in labels]
        if name.startswith(K.ATTR_PREFIX):  # values beyond the kept ones are "(other)"
            other = found[OTHER_LABEL]
            return np.array([found.get(k, other) for k in keys], np.int32)
        return np.array([found[k] for k in keys], np.int32)

    def codes(self, keys: PartKeys, names: Sequence[str]) -> np.ndarray:
        """Each name's cube codes for every row of the keys' table."""
        out = np.zeros((keys.n, len(names)), dtype=np.int32)
        for j, name in enumerate(names):
            if name in (K.LENGTH, K.DUMP_ORDER):
                out[:, j] = self._binned(keys, name)
                continue
            if name in (ROUTING, FIRST_FLIP_LAYER):  # token dimensions: every row
                out[:, j] = routing_codes(keys, name, self.layers)
                continue
            kc = keys.get(name)
            codes = np.broadcast_to(kc.codes, (keys.n,)) if np.ndim(kc.codes) == 0 else kc.codes
            out[:, j] = self._lut(name, kc.labels)[codes]
        return out

    @staticmethod
    def _binned(keys: PartKeys, name: str) -> np.ndarray:
        """The cube's own bins of the sequence length, or its order groups (module constants)."""
        rows = keys.rows()
        if name == K.DUMP_ORDER:
            blocks = order_blocks(keys.sequence_rows().order[rows], ORDER_BLOCK)
            return (blocks // CUBE_ORDER_GROUP).astype(np.int32)
        values = keys.sequence_rows().model_tokens[rows]
        return assign_positions(values, CUBE_EDGES[name]).astype(np.int32)

    @staticmethod
    def token_codes(keys: PartKeys, seq: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """The token dimensions' codes (``TOKEN_DIMS``), in one compiled pass: the codes of the
        keys' turn, turn kind and bin (the cube's labels are theirs, in their order), and the
        cube's own bins of the KV position (from the response's start where the dump gave no
        prompt length) and of the position in the turn."""
        from mismatchctl.stats.cube import kernels as cube_kernels

        out = np.empty((keys.n, len(TOKEN_DIMS)), dtype=np.int32)
        if keys.n == 0:
            return out
        if keys.sequences is None:
            prompt = np.zeros(len(starts), dtype=np.int64)
        else:
            rows = keys.sequences.rows(seq[starts])
            prompt = np.maximum(keys.sequences.prompt_length[rows], 0).astype(np.int64)
        turn = keys.column(S.TURN)
        bad = cube_kernels.token_codes(
            turn, keys.column(S.POSITION), starts.astype(np.int64), prompt,
            keys.probability(S.ROLLOUT),  # the bin key's: numpy's exp, then the edges
            np.asarray(keys.edges, dtype=np.float64)[1:-1],
            np.asarray(CUBE_KV_EDGES[1:], dtype=np.int64),
            np.asarray(CUBE_TURN_POSITION_EDGES[1:], dtype=np.int64),
            len(TURN_INDEX_LABELS) - 1, out,
        )  # fmt: skip
        if bad >= 0:
            raise ValueError(f"turn indices must be >= 0 (found {turn[bad]})")
        return out

    def slice(self, table: pa.Table, keys: PartKeys) -> tuple[np.ndarray, ...]:
        """lr, lt, each token's sequence row, token codes, sequence codes (computed on each
        sequence's first row: they are constant along it)."""
        seq = keys.column(S.SEQ)
        starts = keys.sequence_starts()
        rows = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(seq)]))
        tok = self.token_codes(keys, seq, starts)
        if self.routing:  # MoE runs: the routing of each token's producing position
            tok = np.concatenate([tok, self.codes(keys, self.routing)], axis=1)
        seqc = self.codes(keys.at(starts), [d.name for d in self.spec.seq_dims])
        return keys.column(S.ROLLOUT), keys.column(S.TRAINER), rows, tok, seqc, seq[starts]


CubeState = TypeVar("CubeState")


class _CubeReading(ABC, Generic[CubeState]):
    """What the engine's cube extras share: the columns a cube reads (the token entropy when a
    dimension is binned by it), the coder of a slice's tokens, and the parts' cube states."""

    columns: tuple[str, ...] = (S.GPU, S.POSITION)
    # a cube codes the slice's tokens itself: its state is the same whatever passes are read
    uses_runs = False

    def __init__(self, spec: CubeSpec) -> None:
        self.spec, self.coder, self.keys = spec, _Coder(spec), cube_keys(spec)
        if K.ENTROPY in (d.name for d in spec.token_dims):
            self.columns = (*self.columns, S.TOKEN_ENTROPY)
        self.routing_columns = twin_columns([d.name for d in spec.dims])
        self.states = PartStates(spec)

    def cache_key(self) -> tuple[object, ...]:
        """What the part cache knows this extra by (``engines/part_cache.py``): its spec
        without the run, step and gpu labels (a state is kept by label, ``cache_state``: a
        run that gains a step keeps its parts' states) and what it reads, not its part
        states' bookkeeping (which parts were given a state)."""
        seq = tuple((d.name, d.ordered) if d.name in LABELLED else d for d in self.spec.seq_dims)
        shape = (self.spec.token_dims, seq, self.spec.block_cap, self.spec.max_order)
        return (shape, self.columns, self.routing_columns, self.keys)

    def portable(self, state: Cube | PartCube) -> PortableCube:
        return to_portable(state)

    def restored(self, kept: object, key: Hashable = None) -> Cube | PartCube | None:
        """A kept cube laid out in this extra's spec (None: not exactly: a miss); dense when
        it is the first state of ``key`` (a run), as ``PartStates`` gives them: a selection of
        one part leaves a cube (dense: zeros plus its rows, the same bits)."""
        if not isinstance(kept, PortableCube):
            return None
        part = from_portable(kept, self.spec, LABELLED)
        if part is None:
            return None
        return part.dense() if self.states.first(key) else part

    def compute(self, table: pa.Table, keys: PartKeys) -> CubeState:
        return self.compute_into(None, table, keys)

    @abstractmethod
    def compute_into(
        self, state: CubeState | None, table: pa.Table, keys: PartKeys
    ) -> CubeState: ...


class CubeExtra(_CubeReading[Cube | PartCube]):
    """The engine's ``PartExtra`` computing a K3 cube of every part (merged by addition)."""

    def compute_into(
        self, state: Cube | PartCube | None, table: pa.Table, keys: PartKeys
    ) -> Cube | PartCube:
        """The part's cube so far (the first part's dense, the others' the cells they touch:
        ``stats/cube_part.py``) with the slice's tokens added in place."""
        lr, lt, rows, tok, seqc, _ = self.coder.slice(table, keys)
        cube = self.states.new() if state is None else state
        cube.add(lr, lt, rows, tok, seqc, k3=keys.cube_k3())
        return cube

    def merge(self, a: Cube | PartCube, b: Cube | PartCube) -> Cube:
        return fold(a, b)

    def cache_state(self, state: Cube | PartCube) -> PortableCube:
        """The part's cube by label (``stats/cube/portable.py``), for the part cache."""
        return self.portable(state)

    def from_cache(self, kept: object) -> Cube | PartCube | None:
        return self.restored(kept)


@dataclass
class CubeCells:
    """A side's cube and its sequences' cells (in the order the engine folds the parts)."""

    cube: Cube | PartCube  # a part's, in the engine's fold; a cube once read
    cells: list[SequenceCells]
    sequences: SeqSums | None = None  # the side's per-sequence sums (explain_length.py), once read


class CubeCellsExtra(CubeExtra):
    """:class:`CubeExtra` that also keeps every sequence's cells for the findings' bootstrap
    (``stats/cube_cells.py``), so that `explain` reads its tokens once."""

    def compute(self, table: pa.Table, keys: PartKeys) -> CubeCells:  # type: ignore[override]
        return self.compute_into(None, table, keys)

    def compute_into(  # type: ignore[override]
        self, state: CubeCells | None, table: pa.Table, keys: PartKeys
    ) -> CubeCells:
        """The part's cube and cells so far with the slice's added (the cube in place)."""
        lr, lt, rows, tok, seqc, seq_ids = self.coder.slice(table, keys)
        out = CubeCells(self.states.new(), []) if state is None else state
        cells = out.cube.add(
            lr, lt, rows, tok, seqc, sequence_keys(keys.run, seq_ids), k3=keys.cube_k3()
        )
        assert cells is not None
        out.cells.append(cells)
        return out

    def merge(self, a: CubeCells, b: CubeCells) -> CubeCells:  # type: ignore[override]
        return CubeCells(fold(a.cube, b.cube), a.cells + b.cells)

    def cache_state(self, state: CubeCells) -> tuple[PortableCube, list[SequenceCells]]:  # type: ignore[override]
        """The part's cube by label and its sequences' cells (their codes by ``spec``)."""
        return self.portable(state.cube), state.cells

    def from_cache(self, kept: object) -> CubeCells | None:  # type: ignore[override]
        if not (isinstance(kept, tuple) and len(kept) == 2 and isinstance(kept[0], PortableCube)):
            return None
        maps = code_maps(kept[0].spec, self.spec, LABELLED)
        if maps is None:
            return None
        same = kept[0].spec == self.spec
        moved = [c if same else sequence_codes(c, maps, self.spec.n_seq_dims) for c in kept[1]]
        cube = None if any(c is None for c in moved) else self.restored(kept[0])
        return None if cube is None else CubeCells(cube, moved)  # type: ignore[arg-type]


class RunCubeExtra(_CubeReading[dict[str, Cube | PartCube]]):
    """The engine's ``PartExtra`` computing one K3 cube per run (a spec without a run
    dimension): `diagnose` localizes each run on its own."""

    def compute_into(
        self, state: dict[str, Cube | PartCube] | None, table: pa.Table, keys: PartKeys
    ) -> dict[str, Cube | PartCube]:
        """The part's cube (a part holds one run; the run's first part dense, the others the
        cells they touch) so far with the slice's tokens added."""
        lr, lt, rows, tok, seqc, _ = self.coder.slice(table, keys)
        out = {} if state is None else state
        if keys.run not in out:
            out[keys.run] = self.states.new(keys.run)
        out[keys.run].add(lr, lt, rows, tok, seqc, k3=keys.cube_k3())
        return out

    def merge(
        self, a: dict[str, Cube | PartCube], b: dict[str, Cube | PartCube]
    ) -> dict[str, Cube | PartCube]:
        out = dict(a)
        for run, cube in b.items():
            out[run] = fold(out[run], cube) if run in out else cube
        return out

    def cache_state(self, state: dict[str, Cube | PartCube]) -> dict[str, PortableCube]:
        """Each run's cube by label (``stats/cube/portable.py``), for the part cache."""
        return {run: self.portable(cube) for run, cube in state.items()}

    def from_cache(self, kept: object) -> dict[str, Cube | PartCube] | None:
        if not isinstance(kept, dict):
            return None
        out = {run: self.restored(cube, run) for run, cube in kept.items()}
        return None if any(c is None for c in out.values()) else out  # type: ignore[return-value]


@dataclass
class Explain:
    """What explains the selection's mismatch: findings, uniform dimensions, the mix/rate split
    (with a baseline), the lift table, and the findings' bootstrap intervals."""

    target: str
    baseline: str | None
    explanation: Explanation
    intervals: list[FindingInterval] = field(default_factory=list)
    plots: list[RatePlot] = field(default_factory=list)  # per top finding (the HTML figures)
    length: list[SideScaling] = field(default_factory=list)  # the target's, the baseline's

    def to_dict(self) -> dict[str, Any]:
        out = self.explanation.to_dict()
        for f, iv in zip(out["findings"], self.intervals, strict=False):
            f["rate_ratio_ci_bootstrap"] = iv.rate_ratio_ci
            f["excess_share_ci_bootstrap"] = iv.excess_share_ci
        out["length_scaling"] = {s.side: s.to_dict() for s in self.length}
        return {"explain": {"target": self.target, "baseline": self.baseline, **out}}

    def to_polars(self) -> Any:
        """One row per finding: where, token and excess shares, rate ratio and its intervals."""
        import polars as pl

        rows = []
        for f in self.to_dict()["explain"]["findings"]:
            rows.append({"where": f["sentence"], **{k: v for k, v in f.items() if k != "where"}})
        return pl.DataFrame(rows, infer_schema_length=None)


def read_cubes(
    sides: Sequence[Selection],
    spec: CubeSpec,
    edges: np.ndarray,
    workers: int,
    on_part: Callable[[int], None] | None,
    engine: Engine,
    cells: bool = False,
) -> list[CubeCells]:
    """Each side's cube, from one read of its parts; ``cells``: with its sequences' cells (for
    the findings' bootstrap; else none are kept); with its per-sequence sums, keyed ``target``
    for the first side and ``baseline`` for the others (the length-scaling test)."""
    out = []
    for i, sel in enumerate(sides):
        extra = CubeCellsExtra(spec) if cells else CubeExtra(spec)
        sums = SeqSumsExtra(TARGET if i == 0 else BASELINE)
        runner = engine.runner()
        _, (state, seqs) = runner(sel.tasks, [], edges, sel.rows, workers, on_part, [extra, sums])
        if state is None:
            out.append(CubeCells(Cube(spec), [], seqs))
        elif cells:
            out.append(CubeCells(as_cube(state.cube), state.cells, seqs))
        else:
            out.append(CubeCells(as_cube(state), [], seqs))
    return out


def read_run_cubes(
    sides: Sequence[Selection], spec: CubeSpec, edges: np.ndarray, workers: int, engine: Engine
) -> list[Cube]:
    """Each side's cube without a run dimension (its runs' cubes merged), from one read."""
    out = []
    for sel in sides:
        _, states = engine.runner()(
            sel.tasks, [], edges, sel.rows, workers, None, [RunCubeExtra(spec)]
        )
        out.append(merge_all(map(as_cube, (states[0] or {}).values()), spec))
    return out


def bootstrap(
    expl: Explanation, sides: Sequence[CubeCells], spec: CubeSpec, workers: int = DEFAULT_WORKERS
) -> list[FindingInterval]:
    """The findings' sequence-bootstrap intervals, from the cells the cube's read kept."""
    if not expl.findings:
        return []
    plan = plan_bootstrap(expl)
    accs = plan.accumulators(spec)

    def accumulate(acc: RegionAccumulator, side: CubeCells) -> None:
        for cells in side.cells:
            acc.add_cells(cells)

    jobs = [(acc, side) for acc, side in zip(accs, sides, strict=False) if acc is not None]
    # one thread per side (the kernel releases the GIL); each side's sums in the fold's order
    with ThreadPoolExecutor(max(1, min(workers, len(jobs)))) as pool:
        list(pool.map(lambda job: accumulate(*job), jobs))
    return finalize(plan, *accs)


def build_explain(
    store: Store,
    target: str,
    baseline: str | None = None,
    *,
    bins: str = "log",
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    engine: Engine = LOCAL_ENGINE,
    bootstrap_intervals: bool = True,
) -> Explain:
    sides = [resolve_text(store, target)]
    if baseline is not None:
        sides.append(resolve_text(store, baseline))
        refuse_same(*sides)
    return explain_selections(
        sides[0], sides[1:], target, baseline, bins=bins, workers=workers, on_part=on_part,
        engine=engine, bootstrap_intervals=bootstrap_intervals,
    )  # fmt: skip


def explain_selections(
    target: Selection,
    baselines: Sequence[Selection],
    target_label: str,
    baseline_label: str | None,
    *,
    bins: str = "log",
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    engine: Engine = LOCAL_ENGINE,
    bootstrap_intervals: bool = True,
) -> Explain:
    """:func:`build_explain` of resolved selections; the baseline is the union of
    ``baselines`` (disjoint slices, e.g. the ranges of a run's quiet steps: ``watch``), their
    cubes merged; none: the internal mode."""
    edges = parse_edges(bins)
    with reading(target, *baselines):  # `runs rm` meanwhile is no damage, as in every view
        spec = cube_spec([target, *baselines], edges, routing=True)
        read = read_cubes(
            [target, *baselines], spec, edges, workers, on_part, engine, cells=bootstrap_intervals
        )
    if read[0].cube.tokens == 0:
        from mismatchctl.analysis.selection import empty_selection_error

        raise empty_selection_error(target)
    sides = [read[0]]
    if baselines:
        merged = merge_all([side.cube for side in read[1:]], spec)
        sides.append(CubeCells(merged, [c for side in read[1:] for c in side.cells]))
    cubes = [side.cube for side in sides]
    expl = localize(cubes[0], cubes[1] if len(cubes) > 1 else None, leads=True)
    result = Explain(target_label, baseline_label, expl, plots=rate_plots(expl, cubes))
    result.length = [side_scaling(TARGET, target_label, [read[0].sequences])]
    if baselines:
        found = [side.sequences for side in read[1:]]
        result.length.append(side_scaling(BASELINE, baseline_label or BASELINE, found))
    if bootstrap_intervals:
        result.intervals = bootstrap(expl, sides, spec, workers)
    return result


def refuse_same(target: Selection, baseline: Selection) -> None:
    """A UsageError when the baseline reads the same data as the target: nothing can exceed
    itself."""
    if same_selection(target, baseline):
        raise UsageError(
            f"`{target.label}` and its baseline `{baseline.label}` hold the same data (run "
            f"{', '.join(target.names)}): against itself a selection has no excess to find",
            "give a known-good run or another slice as the baseline, e.g. the same run's "
            "early steps `RUN@steps=0..50`",
        )


MAX_BARS = 60  # values of a finding's dimension drawn one bar each; more are grouped


def rate_plots(expl: Explanation, cubes: Sequence[Cube], top: int = 3) -> list[RatePlot]:
    """Per top finding (or lead), the mean K3 at every value of its first dimension, on both
    sides; an ordered dimension with more than ``MAX_BARS`` values (the steps of a long run) in
    at most that many groups of consecutive values, each group's mean K3 its mass over its
    tokens."""
    out = []
    for f in (expl.findings or expl.leads)[:top]:
        dim = next(iter(f.where))
        spec = cubes[0].spec
        d = spec.dims[spec.index(dim)]
        groups = value_groups(d.size if d.ordered else 0, MAX_BARS) or [
            np.array([k]) for k in range(d.size)
        ]
        sides = []
        for cube in cubes:
            t = cube.table([dim], exact=True)
            n = [float(t[g, Field.TOKENS].sum()) for g in groups]
            a = [float(t[g, Field.K3].sum()) for g in groups]
            sides.append([a[i] / n[i] if n[i] else None for i in range(len(groups))])
        t0 = cubes[0].table([dim], exact=True)
        tokens = [int(t0[g, Field.TOKENS].sum()) for g in groups]
        codes = set(f.region.get(spec.index(dim), ()))
        labels = [run_label(d, int(g[0]), int(g[-1])) for g in groups]
        named = [
            lab for g, lab in zip(groups, labels, strict=True) if codes.intersection(g.tolist())
        ]
        base = sides[1] if len(sides) > 1 else None
        out.append(RatePlot(dim, labels, sides[0], base, tokens, named))
    return out


def value_groups(size: int, most: int) -> list[np.ndarray]:
    """``size`` consecutive codes in at most ``most`` groups of nearly equal length (none when
    they fit one a group)."""
    if size <= most:
        return []
    return [g for g in np.array_split(np.arange(size), most) if len(g)]


__all__ = ["Explain", "build_explain", "cube_spec", "explain_selections"]
