"""The routing rows of one canonicalised batch: decode both sides' routes, compare them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.ingest.batch import RaggedBatch
from mismatchctl.ingest.routes import Layout, SideRoutes, read_side
from mismatchctl.ingest.routing_rows import RouteOptions, RouteTally, routing_table

ONE_SIDED = "routes of one side only (`{}`): nothing to compare them with, not stored"


def batch_routing(
    batch: RaggedBatch,
    where: np.ndarray,
    tokens: pa.Table,
    model: np.ndarray,
    source: str,
    opts: RouteOptions,
) -> tuple[pa.Table | None, RouteTally, str | None]:
    """(routing rows row for row with ``tokens``, the routes' tally, a note) of a batch whose
    model positions are ``where``; no rows unless both sides have routes."""
    tally = RouteTally()
    sides = [batch.routes.get(r) for r in (S.ROLE_ROLLOUT_ROUTES, S.ROLE_TRAINER_ROUTES)]
    present = [s for s in sides if s is not None]
    if len(present) == 1:
        return None, tally, ONE_SIDED.format(present[0].name)
    if not present:
        return None, tally, None
    lengths = batch.lengths()
    prompts = batch.prompt_lengths
    if prompts is None:
        prompts = np.full(batch.n, -1, dtype=np.int64)
    names = [f"sample `{s}` ({batch.location(i)})" for i, s in enumerate(batch.sample_ids)]
    decoded: list[SideRoutes] = []
    for side in present:
        layout = Layout(lengths, prompts, side.widths, names)
        decoded.append(read_side(side.values, side.name, source, layout, side.starts, opts.top_k))
    cols, tally = routing_table(
        decoded[0], decoded[1], lengths, model, where, source, batch.sample_ids, opts
    )
    head = {
        S.STEP: tokens.column(S.STEP),
        S.SEQ: tokens.column(S.SEQ),
        S.POSITION: tokens.column(S.POSITION),
    }
    schema = S.routing_schema(tally.layers, tally.top_k, opts.keep_routes)
    return pa.table({**head, **cols}, schema=schema), tally, None
