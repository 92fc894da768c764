"""MoE routing of the runs of a selection, read in the report's pass (``engines.routing``): per
run, its merged routing sums and the metrics of docs/metrics.md ("Routing"), per layer and per
probability bin; per group of the report's ``--by`` splits, the same metrics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl import schema as S
from mismatchctl.engines import plan as K
from mismatchctl.engines.plan import Selection
from mismatchctl.engines.routing import RoutingExtra, RoutingState
from mismatchctl.stats import bin_label
from mismatchctl.stats.routing_sums import RoutingPartial
from mismatchctl.store.integrity import read_error


@dataclass(frozen=True)
class RoutingResult:
    """One run's routing: its sums, and whether it says routing replay is on; ``by_layer``:
    its JSON lists the metrics per MoE layer too (``report --by layer``)."""

    run: str
    replay: bool  # tag routing_replay=r3
    partial: RoutingPartial
    edges: np.ndarray  # the probability bins' edges
    by_layer: bool = True

    @property
    def metrics(self) -> dict[str, float | int | None]:
        return self.partial.metrics(self.replay)

    def bins(self) -> list[dict[str, Any]]:
        return [{**row, "bin": bin_label(self.edges, row["bin"])} for row in self.partial.by_bin()]

    def first_flips(self) -> list[int]:
        """Per layer, the compared positions whose lowest differing layer it is."""
        return [int(n) for n in self.partial.by_layer_first_flip]

    def to_dict(self) -> dict[str, Any]:
        """Its JSON: what its sums say, made of them here (the sums are not written)."""
        out = {
            "layers": self.partial.layers,
            "top_k": self.partial.top_k,
            "routing_replay": self.replay,
            "metrics": self.metrics,
            "alignment": self.partial.alignment(),
            "by_bin": self.bins(),
        }
        if self.by_layer:
            out["by_layer"] = self.partial.by_layer()
        return out


@dataclass(frozen=True)
class FirstFlipPlot:
    """The first-flip layer histogram of the report's page: per run, per layer, the share (and
    count) of its compared, differing positions whose lowest differing layer it is."""

    runs: list[str]
    layers: list[list[int]]  # per run, its layers 0..L-1
    shares: list[list[float]]
    counts: list[list[int]]


def first_flip_plot(routing: dict[str, RoutingResult]) -> FirstFlipPlot | None:
    """The histogram of the runs with a differing position (None when no run has one)."""
    runs, layers, shares, counts = [], [], [], []
    for run, result in routing.items():
        flips = result.first_flips()
        total = sum(flips)
        if not total:
            continue
        runs.append(run)
        layers.append(list(range(len(flips))))
        shares.append([n / total for n in flips])
        counts.append(flips)
    return FirstFlipPlot(runs, layers, shares, counts) if runs else None


def replay_on(tags: dict[str, str]) -> bool:
    return tags.get(S.TAG_ROUTING_REPLAY, "").strip().lower() == "r3"


def has_routes(selection: Selection) -> bool:
    """Whether some part of the selection has a routing twin (its source's dump had routes)."""
    return any(t.routing for t in selection.tasks)


def routing_extra(
    selection: Selection, splits: Sequence[K.Split], edges: np.ndarray
) -> RoutingExtra | None:
    """The extra of the report's pass computing the routing of the selection's runs and of
    every group of ``splits``; None when no part of the selection has routes."""
    if not has_routes(selection):
        return None
    replay = frozenset(r.name for r in selection.runs if replay_on(r.tags))
    return RoutingExtra(splits, edges, replay)


def routing_results(
    selection: Selection, state: RoutingState | None, edges: np.ndarray, by_layer: bool = True
) -> dict[str, RoutingResult]:
    """Per run of the selection with routes on both sides, its routing, in the selection's
    order (no entry otherwise); ``by_layer``: as ``RoutingResult``'s."""
    if state is None:
        return {}
    tags = {r.name: r.tags for r in selection.runs}
    return {
        run: RoutingResult(run, replay_on(tags[run]), state.runs[run], edges, by_layer)
        for run in selection.names
        if run in state.runs
    }


def route_layers(selections: Sequence[Selection]) -> int:
    """The most MoE layers of the selections' routes (0 without routes): each run's first
    routing part's footer says its layers (one byte of ``route_overlap`` per layer)."""
    found = 0
    for sel in selections:
        seen: set[str] = set()
        for task in sel.tasks:
            if not task.routing or task.run in seen:
                continue
            seen.add(task.run)
            try:
                schema = pq.ParquetFile(task.routing).schema_arrow
            except (OSError, pa.ArrowException) as exc:
                raise read_error(task.run, task.routing, exc) from None
            found = max(found, schema.field(S.ROUTE_OVERLAP).type.byte_width)
    return found
