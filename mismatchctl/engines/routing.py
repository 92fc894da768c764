"""MoE routing in the engine's read: each token part's routing twin (``routing/``: the same rows
in the same order, ``docs/store.md``) is joined to every slice the engine reads of the part, so
that an extra of the pass sees the routing columns beside the logprobs and the split keys;
``RoutingExtra`` reduces the slices to the routing sums of each run and of every group of the
asked splits in one compiled pass (``stats/routing_sums.py``). Local threads or Ray tasks, merged in
part order either way: the same numbers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.columns import numpy_of, valid_of
from mismatchctl.engines import plan as K
from mismatchctl.engines.keys import Label, PartKeys, decode, token_columns, token_group_codes
from mismatchctl.engines.plan import PartTask
from mismatchctl.errors import StoreError
from mismatchctl.stats.per_token import k3 as token_k3
from mismatchctl.stats.routing_sums import (
    GroupCodes,
    RoutingPartial,
    RoutingSums,
    group_sums,
    routing_partial,
)
from mismatchctl.store.integrity import read_error
from mismatchctl.store.parts import read_columns

# the routing columns the metrics read (RoutingExtra); explain and show read ROUTE_PAIRED only
METRIC_COLUMNS = (S.ROUTE_EQUAL, S.ROUTE_OVERLAP, S.ROUTE_PAIRED, S.ROUTE_FLIP_BEFORE,
                  S.ROUTE_TOP_K, S.ROUTE_SHIFTED)  # fmt: skip


def read_twin(task: PartTask, columns: Sequence[str]) -> pa.Table | None:
    """The routing columns of a part's twin (None when its source has no routes), with ``seq``
    to check each slice against; ``route_shifted`` only where the part has it (parts written
    before the alignment test lack it)."""
    if not task.routing:
        return None
    wanted = [c for c in dict.fromkeys([S.SEQ, *columns]) if c != S.ROUTE_SHIFTED]
    optional = (S.ROUTE_SHIFTED,) if S.ROUTE_SHIFTED in columns else ()
    try:
        table = read_columns(task.routing, wanted, optional)
    except (OSError, pa.ArrowException) as exc:
        raise read_error(task.run, task.routing, exc) from None
    if table.num_rows != task.rows:
        raise _not_twins(task)
    return table


def join_twin(piece: pa.Table, twin: pa.Table, offset: int, task: PartTask) -> pa.Table:
    """A slice of the part (rows ``offset`` on) with its twin's routing columns added."""
    rows = twin.slice(offset, piece.num_rows)
    if rows.num_rows != piece.num_rows or not rows.column(S.SEQ).equals(piece.column(S.SEQ)):
        raise _not_twins(task)
    for name in rows.column_names:
        if name != S.SEQ and name not in piece.column_names:
            piece = piece.append_column(name, rows.column(name))
    return piece


def _not_twins(task: PartTask) -> StoreError:
    return StoreError(
        f"run `{task.run}`: routing part {task.routing} does not match its token part {task.path}",
        "run `mismatchctl runs check`; re-ingest the run if a part is damaged.",
    )


@dataclass
class RoutingState:
    """Per run, its routing sums (``RoutingPartial``: per layer and per probability bin too);
    per asked split, the ``RoutingSums`` of each of its groups (keyed by the group's values, as
    the report's groups are)."""

    runs: dict[str, RoutingPartial] = field(default_factory=dict)
    groups: list[dict[tuple[Label, ...], RoutingSums]] = field(default_factory=list)


class RoutingExtra:
    """The engine's ``PartExtra`` of the routing metrics: slices of parts with a routing twin
    (the others add nothing), per run and per group of ``splits``; ``replay``: the runs that
    say routing replay is on (their rows count in ``r3_violation_fraction``)."""

    routing_columns: tuple[str, ...] = METRIC_COLUMNS

    def __init__(
        self, splits: Sequence[K.Split], edges: np.ndarray, replay: frozenset[str]
    ) -> None:
        self.splits, self.edges, self.replay = list(splits), edges, replay
        self.keys = tuple(dict.fromkeys([K.BIN, *(k for s in self.splits for k in s)]))
        self.columns = tuple(token_columns(self.keys))

    def empty(self) -> RoutingState:
        return RoutingState({}, [{} for _ in self.splits])

    def compute(self, table: pa.Table, keys: PartKeys) -> RoutingState:
        if S.ROUTE_PAIRED not in table.column_names:
            return self.empty()
        layers = table.schema.field(S.ROUTE_OVERLAP).type.byte_width
        top_k = int(table.column(S.ROUTE_TOP_K)[0].as_py())
        equal_col = table.column(S.ROUTE_EQUAL).combine_chunks()
        lr = keys.column(S.ROLLOUT)
        r = keys.column(S.TRAINER) - lr
        codes, labels = self._groups(keys)
        partial, g_counts, g_k3 = routing_partial(
            layers,
            top_k,
            numpy_of(equal_col, fill=0),
            valid_of(equal_col),
            _overlap(table.column(S.ROUTE_OVERLAP).combine_chunks(), layers),
            numpy_of(table.column(S.ROUTE_PAIRED)),
            numpy_of(table.column(S.ROUTE_FLIP_BEFORE)),
            token_k3(r),
            (keys.get(K.BIN).codes, len(self.edges) - 1),
            codes,
        )
        if S.ROUTE_SHIFTED in table.column_names:
            partial.add_shifted(_fixed_bytes(table.column(S.ROUTE_SHIFTED).combine_chunks(), 4))
        replay = keys.run in self.replay
        state = RoutingState({keys.run: partial}, [])
        start = 0
        for split_labels in labels:
            size = int(np.prod([len(v) for v in split_labels])) if split_labels else 1
            found: dict[tuple[Label, ...], RoutingSums] = {}
            for g in np.flatnonzero(g_counts[start : start + size, 8:].sum(axis=1)):
                row = start + int(g)
                found[decode(int(g), split_labels)] = group_sums(
                    g_counts[row], g_k3[row], layers, top_k, replay
                )
            state.groups.append(found)
            start += size
        return state

    def _groups(self, keys: PartKeys) -> tuple[GroupCodes, list[list[list[Label]]]]:
        """Each token's group in every split (one flat index space), and each split's labels
        (the split keys' codes as the report's groups have them: ``engines/keys.py``)."""
        codes = np.empty((len(self.splits), keys.n), np.int64)
        labels, offset = [], 0
        for i, split in enumerate(self.splits):
            code, size, split_labels = token_group_codes(keys, split)
            np.add(code, offset, out=codes[i])
            labels.append(split_labels)
            offset += size
        return GroupCodes(codes, offset), labels

    def merge(self, a: RoutingState, b: RoutingState) -> RoutingState:
        runs = dict(a.runs)
        for run, partial in b.runs.items():
            total = runs.get(run)
            if total is not None and (total.layers, total.top_k) != (
                partial.layers,
                partial.top_k,
            ):
                raise StoreError(
                    f"run `{run}` holds routes of {total.layers} layers x top-{total.top_k} "
                    f"and of {partial.layers} layers x top-{partial.top_k}",
                    "routes of one run come from one model: ingest each model into its own run.",
                )
            runs[run] = partial if total is None else total.merge(partial)
        groups = []
        for mine, theirs in zip(a.groups, b.groups, strict=True):
            out = dict(mine)
            for key, sums in theirs.items():
                out[key] = out[key].merge(sums) if key in out else sums
            groups.append(out)
        return RoutingState(runs, groups)


def _overlap(col: pa.Array, layers: int) -> np.ndarray:
    """uint8 [rows, layers] (rows without a comparison read as zeros: never summed)."""
    return _fixed_bytes(col, layers)


def _fixed_bytes(col: pa.Array, width: int) -> np.ndarray:
    """A fixed-size binary column of ``width`` bytes as uint8 [rows, width] (a view)."""
    if len(col) == 0:
        return np.zeros((0, width), np.uint8)
    raw = np.frombuffer(col.buffers()[1], dtype=np.uint8)
    return raw[col.offset * width : (col.offset + len(col)) * width].reshape(-1, width)
