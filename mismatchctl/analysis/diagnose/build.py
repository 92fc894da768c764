"""`diagnose`'s read of the store: the report with the extras every check reads (in one pass over
the parts), each run's cube and steps, the baseline's explanation, then every check in the
registry's order."""

from __future__ import annotations

from collections.abc import Callable

from mismatchctl.analysis.diagnose.baseline_signs import BaselineSignsExtra, baseline_signs
from mismatchctl.analysis.diagnose.checks import token_classes
from mismatchctl.analysis.diagnose.context import (
    BaselineView,
    Context,
    RunView,
    cube_gpus,
    step_series,
)
from mismatchctl.analysis.diagnose.diagnosis import Diagnosis
from mismatchctl.analysis.diagnose.extra import DiagnoseExtra
from mismatchctl.analysis.diagnose.registry import run_checks
from mismatchctl.analysis.explain import RunCubeExtra, cube_spec, refuse_same
from mismatchctl.analysis.report.report import Report, report_on
from mismatchctl.analysis.routing.routing import routing_extra
from mismatchctl.analysis.selection import reread, resolve_text
from mismatchctl.analysis.token_classes import TokenClassExtra, class_tables, summarize, top_size
from mismatchctl.analysis.tokenizer import RunDecoders, run_decoders
from mismatchctl.analysis.turn_edges import EdgeExtra
from mismatchctl.analysis.whatif.whatif import SEQ_CELLS, WhatifExtra
from mismatchctl.engines.choice import LOCAL_ENGINE, Engine
from mismatchctl.engines.plan import Selection
from mismatchctl.parallel import DEFAULT_WORKERS
from mismatchctl.stats import parse_bins
from mismatchctl.stats import whatif as WI
from mismatchctl.stats.cube.cube import Cube, merge_all
from mismatchctl.stats.cube.part import as_cube
from mismatchctl.stats.cube.spec import CubeSpec
from mismatchctl.stats.hot_sequences import HotSequenceState
from mismatchctl.stats.localize.explain import explain as localize
from mismatchctl.stats.localize.tables import SideTables
from mismatchctl.stats.sign_coherence import SignCoherence
from mismatchctl.stats.step_regimes import split_steps, step_rates, trend
from mismatchctl.store import Store

SUGGESTED = WI.Method("seq-mis", 2.0)  # the study's best correction (BACKGROUND.md)
EDGES = parse_bins("log")  # the report's default bins: the token-mix strata of the cubes


def build_diagnosis(
    store: Store,
    selector: str,
    *,
    baseline: str | None = None,
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    engine: Engine = LOCAL_ENGINE,
    tokenizer: str | None = None,
) -> Diagnosis:
    """Every check on the selection; ``baseline``: a selector every relative check also judges
    the selection against (``explain --baseline``); ``tokenizer``: read and remembered for the
    selection's runs (else each run's remembered one), for the token-class check."""

    decoders = RunDecoders()

    def read() -> tuple[Report, list, Selection | None, CubeSpec]:
        nonlocal decoders
        selection = resolve_text(store, selector)
        base = None if baseline is None else resolve_text(store, baseline)
        if base is not None:
            refuse_same(selection, base)
        report, spec, decoders = read_for_diagnosis(
            store, selection, base, tokenizer, workers=workers, on_part=on_part, engine=engine
        )
        return report, report.extra_states, base, spec

    report, (state, cells, cubes, edges, *classes), base, spec = reread(read)
    ctx = Context(report, state, _whole(cells), selector, step_series(report), edges=edges)
    if classes and classes[0] is not None:
        ctx.classes = summarize(classes[0], decoders)
    ctx.classes_note = "; ".join(decoders.notes)
    ctx.runs = {run: run_view(report, run, cube) for run, cube in sorted((cubes or {}).items())}
    if base is not None:
        ctx.baseline = _baseline_view(ctx, base, spec, workers, engine)
    return Diagnosis(report, run_checks(ctx), baseline)


def read_for_diagnosis(
    store: Store,
    selection: Selection,
    base: Selection | None,
    tokenizer: str | None,
    *,
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    engine: Engine = LOCAL_ENGINE,
) -> tuple[Report, CubeSpec, RunDecoders]:
    """The selection's report with the extras every check reads, from one read of its parts
    (``Report.extra_states``: the diagnose sums, the what-if, the runs' cubes, the turn edges,
    and the token classes of runs with a tokenizer); the cubes' spec, shared with ``base``."""
    spec = cube_spec([selection] if base is None else [selection, base], EDGES, with_run=False)
    extras = [
        DiagnoseExtra(),
        WhatifExtra([SUGGESTED]),
        RunCubeExtra(spec),
        EdgeExtra(EDGES),
    ]
    decoders = run_decoders(store, selection.names, tokenizer)
    tables = class_tables(decoders)  # runs with a tokenizer: the token_classes check
    if tables:
        c = token_classes.T  # how many of the worst tokens to classify
        k = top_size(selection_tokens(selection), c.CLASS_TOP_SHARE, c.CLASS_TOP_LEAST,
                     c.CLASS_TOP_MOST)  # fmt: skip
        extras.append(TokenClassExtra(tables, EDGES, k))
    report = report_on(
        selection, by_gpu=True, workers=workers, on_part=on_part, extras=extras, engine=engine
    )
    return report, spec, decoders


def run_view(report: Report, run: str, cube: Cube) -> RunView:
    """A run's cube, its steps' rates, split and trend, and its internal localization (the
    cube's search tables made once for the four, and kept for the checks)."""
    t = SideTables(cube)
    rates = step_rates(cube, tables=t)
    tags = next((r.tags for r in report.selection.runs if r.name == run), {})
    return RunView(
        run, dict(tags), cube, rates, split_steps(cube, rates, tables=t),
        trend(cube, rates, tables=t), localize(cube, tables=t), t,
    )  # fmt: skip


def _baseline_view(
    ctx: Context, base: Selection, spec: CubeSpec, workers: int, engine: Engine
) -> BaselineView:
    target = ctx.cube
    found, signs, routing, sequences = _baseline_read(base, spec, workers, engine)
    if target is None or found.tokens == 0:
        from mismatchctl.analysis.selection import empty_selection_error

        raise empty_selection_error(base)
    return BaselineView(
        base.label or ", ".join(base.names), localize(target, found, tables=ctx.tables),
        cube_gpus(found), found, routing, signs, sequences,
    )  # fmt: skip


def _baseline_read(
    base: Selection, spec: CubeSpec, workers: int, engine: Engine
) -> tuple[
    Cube, SignCoherence | None, dict[str, float | int | None] | None, HotSequenceState | None
]:
    """The baseline's cube, its sign coherence (``baseline_signs.py``), when it has MoE routes
    its routing metrics (its runs' sums merged), from one read: the tokens no flipped route
    reaches are compared with the run's (``causes/precision.py``, ``beside_flips``); and its
    per-sequence sums, its runs joined (``stats/tail_excess.py``)."""
    routing = routing_extra(base, [], EDGES)
    extras = [RunCubeExtra(spec), BaselineSignsExtra(), *([routing] if routing is not None else [])]
    _, states = engine.runner()(base.tasks, [], EDGES, base.rows, workers, None, extras)
    cube = merge_all(map(as_cube, (states[0] or {}).values()), spec)
    signs = baseline_signs(states[1])
    sequences = states[1].joined() if states[1] is not None else None
    partials = list(states[2].runs.values()) if routing is not None and states[2] else []
    if not partials:
        return cube, signs, None, sequences
    merged = partials[0]
    for p in partials[1:]:
        try:
            merged = merged.merge(p)
        except ValueError:  # runs of other models (layers, top-k): no one set of routes
            return cube, signs, None, sequences
    return cube, signs, merged.metrics(False), sequences


def _whole(cells: dict | None) -> dict | None:
    """The seq-mis what-if of the whole selection, from the cells of the extra."""
    if not cells:
        return None
    total = None
    for key, state in cells.items():
        if key[0] == SEQ_CELLS:
            total = state if total is None else WI.merge(total, state)
    return None if total is None else WI.finalize(total[0])


def selection_tokens(sel: Selection) -> int:
    """The model tokens of the selection's sources (before its step or gpu filter)."""
    return sum(
        src.model_tokens
        for run in sel.runs
        for src in run.sources
        if all(src.tags.get(k) == v for k, v in sel.tags.items())
    )


__all__ = ["build_diagnosis"]
