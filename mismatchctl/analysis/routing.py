"""MoE routing of a run: its routing parts read beside their token parts, merged in part order.

A source with routes on both sides has routing parts that are twins of its token parts (same
name under ``routing/``, the same rows in the same order): each pair is reduced to a
:class:`~mismatchctl.stats.routing.RoutingPartial`; the partials are merged in part order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl import schema as S
from mismatchctl.errors import StoreError
from mismatchctl.stats.routing import RoutingPartial, routing_partial
from mismatchctl.store.parts import ROUTING, TOKENS
from mismatchctl.store.store import Store


@dataclass
class RoutingResult:
    run: str
    replay: bool  # the run says routing replay is on (tag routing_replay=r3)
    partial: RoutingPartial | None  # None: the run has no routes on both sides
    tokens: int  # model tokens of the sources with routes

    def to_dict(self) -> dict:
        if self.partial is None:
            return {"run": self.run, "routes": False}
        return {
            "run": self.run,
            "routes": True,
            "layers": self.partial.layers,
            "top_k": self.partial.top_k,
            "routing_replay": self.replay,
            "tokens": self.tokens,
            "metrics": self.partial.metrics(self.replay),
            "by_layer": self.partial.by_layer(),
        }


def run_routing(store: Store, run: str) -> RoutingResult:
    info = store.run(run)
    replay = info.tags.get(S.TAG_ROUTING_REPLAY, "").lower() == "r3"
    twins = {p.path.replace(f"{ROUTING}/", f"{TOKENS}/", 1): p for p in store.parts(run, ROUTING)}
    total: RoutingPartial | None = None
    tokens = 0
    for part in store.parts(run, TOKENS):
        twin = twins.get(part.path)
        if twin is None:
            continue
        partial = part_routing(store, part.path, twin.path)
        tokens += part.rows
        total = partial if total is None else total.merge(partial)
    return RoutingResult(run, replay, total, tokens)


def part_routing(store: Store, token_path: str, routing_path: str) -> RoutingPartial:
    """The routing sums of one token part and its twin routing part."""
    tok = pq.read_table(store.location(token_path), columns=[S.SEQ, S.ROLLOUT, S.TRAINER])
    rt = pq.read_table(store.location(routing_path))
    if rt.num_rows != tok.num_rows or not rt.column(S.SEQ).equals(tok.column(S.SEQ)):
        raise StoreError(
            f"routing part {routing_path} does not match its token part {token_path}",
            "run `mismatchctl runs check`; re-ingest the run if a part is damaged.",
        )
    layers = rt.schema.field(S.ROUTE_OVERLAP).type.byte_width
    top_k = _top_k(rt)
    equal_col = rt.column(S.ROUTE_EQUAL).combine_chunks()
    compared = equal_col.is_valid().to_numpy(zero_copy_only=False)
    equal = equal_col.fill_null(0).to_numpy(zero_copy_only=False)
    overlap = _overlap(rt.column(S.ROUTE_OVERLAP).combine_chunks(), layers)
    r = tok.column(S.TRAINER).to_numpy() - tok.column(S.ROLLOUT).to_numpy()
    k3 = np.expm1(r) - r
    return routing_partial(
        layers,
        top_k,
        equal,
        compared,
        overlap,
        rt.column(S.ROUTE_PAIRED).to_numpy(),
        rt.column(S.ROUTE_FLIP_BEFORE).to_numpy(zero_copy_only=False),
        k3,
    )


def _top_k(table: pa.Table) -> int:
    values = table.column(S.ROUTE_TOP_K)
    return int(values[0].as_py()) if len(values) else 0


def _overlap(col: pa.Array, layers: int) -> np.ndarray:
    """uint8 [rows, layers] (null rows: zeros, never read)."""
    buf = col.buffers()[1]
    raw = np.frombuffer(buf, dtype=np.uint8, count=(col.offset + len(col)) * layers)
    return raw.reshape(-1, layers)[col.offset :]
