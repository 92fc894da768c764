"""Build a report: select, plan, run the engine, roll up, and derive shares, bands and the
per-hardware summary. Everything a renderer shows is computed here or in ``stats``."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from mismatchctl.analysis.figures import FigureData, FigureExtra, figure_data
from mismatchctl.analysis.selection import (
    empty_selection_error,
    removed_while_reading,
    reread,
    select,
)
from mismatchctl.curves.analysis import RunCurves, selection_curves
from mismatchctl.engines import plan as K
from mismatchctl.engines.choice import LOCAL_ENGINE, Engine
from mismatchctl.engines.local import PartExtra
from mismatchctl.engines.plan import Selection, StepRange
from mismatchctl.engines.rollup import Groups, rollup, sort_key
from mismatchctl.engines.sequences import empty_sequences
from mismatchctl.errors import StoreError, UsageError
from mismatchctl.parallel import DEFAULT_WORKERS
from mismatchctl.stats import (
    QUANTILE_METRICS,
    TOKEN_METRICS,
    Partial,
    band,
    parse_bins,
    shares,
    step_summary,
)
from mismatchctl.stats import registry as M
from mismatchctl.store import Store

AGGREGATION = "token-mean"
BIN_METRICS = (M.TOKENS, M.OVERFLOW_TOKENS, *TOKEN_METRICS, *QUANTILE_METRICS)
# Beyond the per-run splits, the whole selection by bin and by turn kind: the terminal tables.
SELECTION_SPLITS: list[K.Split] = [(K.TURN_KIND,), (K.BIN,)]


@dataclass
class Group:
    by: dict[str, Any]
    partial: Partial
    metrics: dict[str, Any]
    band: str | None = None


@dataclass
class Report:
    selection: Selection
    bin_edges: np.ndarray
    splits: list[K.Split]
    groups: dict[K.Split, list[Group]]
    excluded: dict[str, int]
    hardware: list[dict[str, Any]] | None = None
    aggregation: str = AGGREGATION
    notes: list[str] = field(default_factory=list)
    extra_states: list[Any] = field(default_factory=list)
    figures: FigureData | None = None  # densities and samples of the HTML report
    curves: dict[str, RunCurves] = field(default_factory=dict)  # per run, training curves

    def split(self, *keys: str) -> list[Group]:
        return self.groups.get(K.canonical(list(keys)), [])

    def whole(self) -> Group | None:
        found = self.groups.get((), [])
        return found[0] if found else None


def build_report(
    store: Store,
    runs: list[str] | None = None,
    *,
    bins: str = "log",
    by: list[K.Split] | None = None,
    by_gpu: bool = False,
    steps: StepRange | None = None,
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    figures: bool = False,
    engine: Engine = LOCAL_ENGINE,
) -> Report:
    return reread(
        lambda: report_on(
            select(store, runs, steps),
            bins=bins,
            by=by,
            by_gpu=by_gpu,
            workers=workers,
            on_part=on_part,
            figures=figures,
            engine=engine,
        )
    )


def parse_edges(bins: str) -> np.ndarray:
    try:
        return parse_bins(bins)
    except ValueError as exc:
        raise UsageError(
            f"--bins: {exc}", "use log, linear:N or edges such as 0,1e-3,0.5,1."
        ) from None


def report_on(
    selection: Selection,
    *,
    bins: str = "log",
    by: list[K.Split] | None = None,
    by_gpu: bool = False,
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    extras: Sequence[PartExtra] = (),
    figures: bool = False,
    engine: Engine = LOCAL_ENGINE,
) -> Report:
    """The report of an explicit selection (runs, or a slice of the store); ``extras`` are
    computed in the same read of every part and left in ``Report.extra_states``; ``figures``
    adds the densities and samples of the HTML page; ``engine`` says where parts are read.

    A selection without model tokens is an error (the same for every command); so is a run of
    it removed while it is read (RunRemovedError, which ``reread`` retries when the run was not
    named)."""
    edges = parse_edges(bins)
    try:
        report = _read(selection, edges, by, by_gpu, workers, on_part, extras, figures, engine)
    except (StoreError, OSError, pa.ArrowException):
        removed = removed_while_reading(selection)
        if removed is None:
            raise
        raise removed from None
    if report.whole() is None:
        raise empty_selection_error(selection)
    return report


def _read(
    selection: Selection,
    edges: np.ndarray,
    by: list[K.Split] | None,
    by_gpu: bool,
    workers: int,
    on_part: Callable[[int], None] | None,
    extras: Sequence[PartExtra],
    figures: bool,
    engine: Engine,
) -> Report:
    figure_extra = FigureExtra() if figures else None
    if figure_extra is not None:
        extras = [*extras, figure_extra]
    wanted = list(dict.fromkeys([*K.default_splits(by_gpu), *SELECTION_SPLITS, *(by or [])]))
    internal = [(K.RUN, K.GPU, K.STEP), (K.GPU, K.TURN_KIND)] if by_gpu else []
    passes = K.plan(wanted + internal)
    finest, extra_states = engine.runner()(
        selection.tasks, passes, edges, selection.rows, workers, on_part, extras
    )
    rolled = {}
    for split in wanted + internal:
        p = K.pass_for(split, passes)
        rolled[split] = rollup(split, p, finest[passes.index(p)])
    groups = {s: _groups(s, rolled[s]) for s in wanted}
    report = Report(selection, edges, wanted, groups, _excluded(selection))
    report.extra_states = extra_states
    report.curves = selection_curves(selection, groups.get((K.RUN, K.STEP), []))
    if figure_extra is not None:
        report.figures = figure_data(extra_states[-1], figure_extra)
    if by_gpu:
        report.hardware = _hardware(rolled)
    return report


def _groups(split: K.Split, rolled: Groups) -> list[Group]:
    """Finalized groups of one split; bin groups carry token metrics, shares and quantiles only
    (a sequence cut by probability bins is not a meaningful unit)."""
    parents: Groups = {}
    if K.BIN in split:
        parent_split = tuple(k for k in split if k != K.BIN)
        parents = rollup(parent_split, K.Pass((K.BIN,), split), rolled)
    out = []
    for key in sorted(rolled, key=sort_key):
        partial = rolled[key]
        by = dict(zip(split, key, strict=True))
        metrics = partial.finalize()
        if K.BIN in split:
            metrics = {k: v for k, v in metrics.items() if k in BIN_METRICS}
            parent = parents[tuple(v for k, v in by.items() if k != K.BIN)]
            metrics.update(shares(partial, parent))
        group_band = band(metrics.get(M.VLLM_KL)) if K.STEP in split else None
        out.append(Group(by, partial, metrics, group_band))
    return out


def _excluded(selection: Selection) -> dict[str, int]:
    dropped = sum(r.dropped_sequences for r in selection.runs)
    return {"empty_sequences": empty_sequences(selection), "dropped_sequences": dropped}


def _hardware(rolled: dict[K.Split, Groups]) -> list[dict[str, Any]]:
    """Per gpu: runs, batches, tokens, vllm_kl, the per-batch series summary, later/first ratio,
    and the share of tokens with p_infer < 1e-3."""
    per_gpu = rolled[(K.GPU,)]
    batches = rolled[(K.RUN, K.GPU, K.STEP)]
    kinds = rolled[(K.GPU, K.TURN_KIND)]
    rows = []
    for (gpu,) in sorted(per_gpu, key=sort_key):
        partial = per_gpu[(gpu,)]
        series = {(r, s): p for (r, g, s), p in batches.items() if g == gpu}
        first, later = kinds.get((gpu, "first")), kinds.get((gpu, "later"))
        row: dict[str, Any] = {
            "gpu": gpu,
            "runs": sorted({r for r, _ in series}),
            M.BATCHES: len(series),
            M.TOKENS: partial.tokens,
            M.VLLM_KL: partial.finalize()[M.VLLM_KL],
        }
        row.update(step_summary(p.finalize()[M.VLLM_KL] for p in series.values()))
        row.pop("steps", None)
        row[M.LATER_FIRST_VLLM_KL_RATIO] = _ratio(later, first)
        row[M.LOW_PROB_TOKEN_SHARE] = (
            partial.low_prob_tokens / partial.tokens if partial.tokens else None
        )
        rows.append(row)
    return rows


def _ratio(later: Partial | None, first: Partial | None) -> float | None:
    if later is None or first is None:
        return None
    a, b = later.finalize()[M.VLLM_KL], first.finalize()[M.VLLM_KL]
    if a is None or b is None or b == 0 or math.isinf(b):
        return None
    return a / b
