"""The routing parts of a source (MoE routes), written beside its token parts."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from mismatchctl.ingest.canonical import Context
from mismatchctl.stats.routing_sums import SHIFT_TEXT
from mismatchctl.store.catalog import PartRecord
from mismatchctl.store.parts import ROUTING, Lanes, PartWriter


class RoutingWriter:
    """The routing parts of a source, twins of its token parts: the same batches in the same
    order to a writer with the same part limit, slots and name (``routing/`` for ``tokens/``),
    so that routing part k holds the routing rows of token part k, row for row."""

    def __init__(
        self, staging: Path, run: str, tokens: PartWriter, lanes: Lanes | None, slots: int
    ) -> None:
        self.staging, self.run, self.tokens, self.lanes, self.slots = (
            staging,
            run,
            tokens,
            lanes,
            slots,
        )
        self.writer: PartWriter | None = None

    def write(self, table: pa.Table | None) -> None:
        if table is None:
            return
        if self.writer is None:
            limit = self.tokens.limit
            self.writer = PartWriter(
                self.staging, ROUTING, self.run, table.schema, limit, self.lanes, self.slots
            )
            self.writer.tag = self.tokens.tag
        self.writer.write(table)

    def close(self) -> list[PartRecord]:
        return [] if self.writer is None else self.writer.close()

    def shutdown(self) -> None:
        if self.writer is not None:
            self.writer.shutdown()


def route_notes(ctx: Context) -> list[str]:
    """What the source's routes held, and the rows not taken as routes."""
    notes = sorted(ctx.route_notes)
    t = ctx.route_tally
    if not t.layers:
        return notes
    notes.append(
        f"routes: {t.layers} layers x top-{t.top_k}, expert ids up to {t.max_id}; aligned "
        f"per {ctx.routes.aligned} position (--routes-aligned); {t.missing_rows:,} model "
        "tokens without a route on both sides"
        + ("; full routes kept (--keep-routes)" if ctx.routes.keep_routes else "")
    )
    if t.zero_rows:
        notes.append(
            f"routes: {t.zero_rows:,} rows of zeros, verl's mark of a position the engine did not "
            "record (the last response token, tokens after the last generation, padding): not "
            "taken as routes"
        )
    for kind, rows in sorted(t.bugs.items()):
        notes.append(f"routes: capture bug: {rows:,} {kind}, not taken as routes")
    off = t.misaligned()
    if off is not None:
        shift, aligned, best = off
        notes.append(
            f"routes: misaligned? the trainer's routes agree with the rollout's on {best:.1%} of "
            f"the layer routes set {SHIFT_TEXT[shift]}, on {aligned:.1%} aligned (`mismatchctl "
            "diagnose` judges them: route_capture); check how each side's routes are dumped"
        )
    return notes
