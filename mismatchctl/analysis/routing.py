"""MoE routing of the runs of a selection (``engines.routing``): per run, its merged routing sums
and the metrics of docs/metrics.md ("Routing"), per layer and per probability bin."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mismatchctl import schema as S
from mismatchctl.engines.choice import LOCAL_ENGINE, Engine
from mismatchctl.engines.plan import Selection
from mismatchctl.engines.routing import routing_tasks, run_routing
from mismatchctl.parallel import DEFAULT_WORKERS
from mismatchctl.stats import bin_label
from mismatchctl.stats.routing import RoutingPartial
from mismatchctl.store import Store
from mismatchctl.store.parts import ROUTING

ROUTING_LAYER = "layer"  # `--by layer`: the routing per MoE layer


@dataclass
class RoutingResult:
    """One run's routing: its sums, and whether it says routing replay is on."""

    run: str
    replay: bool  # tag routing_replay=r3
    partial: RoutingPartial
    edges: np.ndarray  # the probability bins' edges

    @property
    def metrics(self) -> dict[str, Any]:
        return self.partial.metrics(self.replay)

    def bins(self) -> list[dict[str, Any]]:
        return [{**row, "bin": bin_label(self.edges, row["bin"])} for row in self.partial.by_bin()]

    def to_dict(self, by_layer: bool = True) -> dict[str, Any]:
        out = {
            "layers": self.partial.layers,
            "top_k": self.partial.top_k,
            "routing_replay": self.replay,
            "metrics": self.metrics,
            "by_bin": self.bins(),
        }
        if by_layer:
            out["by_layer"] = self.partial.by_layer()
        return out


def replay_on(tags: dict[str, str]) -> bool:
    return tags.get(S.TAG_ROUTING_REPLAY, "").strip().lower() == "r3"


def selection_routing(
    store: Store,
    selection: Selection,
    edges: np.ndarray,
    engine: Engine = LOCAL_ENGINE,
    workers: int = DEFAULT_WORKERS,
) -> dict[str, RoutingResult]:
    """Per run of the selection with routes on both sides, its routing (no entry otherwise)."""
    known = {str(store.part_path(p)) for r in selection.runs for p in store.parts(r.name, ROUTING)}
    if not known:
        return {}
    tasks = routing_tasks(selection.tasks, known)
    partials = run_routing(tasks, selection.rows, edges, engine, workers)
    tags = {r.name: r.tags for r in selection.runs}
    return {
        run: RoutingResult(run, replay_on(tags[run]), partial, edges)
        for run, partial in partials.items()
    }
