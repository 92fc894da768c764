"""`diagnose`: every check of the five layers on one selection, from one read of the store.

The layers follow the lesson of the vLLM V0 -> V1 migration (BACKGROUND.md): rule out data
problems and *semantic* mismatch (the two sides computing different distributions), then locate
the *inference-path* mismatch (tokens, turns, hardware) and its *trajectory*, and only then ask
whether an *objective*-side correction is warranted. Thresholds: ``diagnose_thresholds``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from mismatchctl.analysis import checks_cause as C
from mismatchctl.analysis import checks_curves as CC
from mismatchctl.analysis import checks_data as D
from mismatchctl.analysis import checks_ends as EN
from mismatchctl.analysis import checks_localize as L
from mismatchctl.analysis import checks_path as P
from mismatchctl.analysis import checks_policy as PO
from mismatchctl.analysis import checks_routing as RT
from mismatchctl.analysis import checks_sequences as SQ
from mismatchctl.analysis import checks_template as TE
from mismatchctl.analysis import checks_tokens as TK
from mismatchctl.analysis import checks_trajectory as R
from mismatchctl.analysis import diagnose_thresholds as T
from mismatchctl.analysis.diagnose_base import (
    FAIL,
    LAYERS,
    NA,
    OK,
    WARN,
    BaselineView,
    Check,
    Context,
    RunView,
    cube_gpus,
    step_series,
    worst,
)
from mismatchctl.analysis.diagnose_extra import DiagnoseExtra
from mismatchctl.analysis.explain import RunCubeExtra, cube_spec, read_run_cubes, refuse_same
from mismatchctl.analysis.report import Report, report_on
from mismatchctl.analysis.selection import reread, resolve_text
from mismatchctl.analysis.token_classes import TokenClassExtra, class_tables, summarize, top_size
from mismatchctl.analysis.tokenizer import RunDecoders, run_decoders
from mismatchctl.analysis.turn_edges import EdgeExtra
from mismatchctl.analysis.whatif import SEQ_CELLS, WhatifExtra
from mismatchctl.engines.choice import LOCAL_ENGINE, Engine
from mismatchctl.engines.plan import Selection
from mismatchctl.parallel import DEFAULT_WORKERS
from mismatchctl.stats import parse_bins
from mismatchctl.stats import whatif as WI
from mismatchctl.stats.cube import Cube
from mismatchctl.stats.cube_spec import CubeSpec
from mismatchctl.stats.localize import explain as localize
from mismatchctl.stats.step_regimes import split_steps, step_rates, trend
from mismatchctl.store import Store

CHECKS: list[Callable[[Context], Check | None]] = [  # None: not applicable to the data at all
    D.alignment,
    D.token_ids,
    D.sentinels,
    D.empty_sequences,
    D.trailing_padding,
    D.duplicates,
    D.offset,
    D.temperature,
    D.top_p,
    TE.turn_edges,
    EN.turn_ends,
    TK.token_classes,
    RT.routing_replay,
    L.baseline,
    L.localized,
    P.low_probability,
    P.tool_responses,
    P.hardware,
    SQ.hot_sequences,
    RT.routing_flips,
    R.spikes,
    R.regimes,
    R.trend,
    R.spiral,
    R.severe_batches,
    R.staleness,
    PO.policy_signs,
    CC.coincident_spikes,
    CC.rise_before_drop,
    C.cause,
    C.objective,
]
SUGGESTED = WI.Method("seq-mis", 2.0)  # the study's best correction (BACKGROUND.md)
EDGES = parse_bins("log")  # the report's default bins: the token-mix strata of the cubes


@dataclass
class Diagnosis:
    report: Report
    checks: list[Check]
    baseline: str | None = None  # the --baseline selector, if any

    @property
    def verdict(self) -> str:
        return worst([c.verdict for c in self.checks])

    @property
    def failed(self) -> bool:
        return any(c.verdict == FAIL for c in self.checks)

    def layer(self, name: str) -> list[Check]:
        return [c for c in self.checks if c.layer == name]

    @property
    def label(self) -> str:
        sel = self.report.selection
        return sel.label or ", ".join(sel.names)

    def counts(self) -> dict[str, int]:
        verdicts = [c.verdict for c in self.checks]
        return {v: verdicts.count(v) for v in (FAIL, WARN, OK, NA)}

    def top_finding(self) -> str:
        """The first failing check's finding, else the first warning's, else "no problem"."""
        for verdict in (FAIL, WARN):
            for c in self.checks:
                if c.verdict == verdict:
                    return f"{c.name}: {c.finding}"
        return "no check fails or warns"

    def sections(self, brief: bool = False) -> list[Any]:
        """The diagnosis as sections; ``brief``: the verdict and what fails or warns only."""
        from mismatchctl.analysis.diagnose_view import diagnosis_sections

        return diagnosis_sections(self, brief)

    def to_dict(self) -> dict[str, Any]:
        """The report's JSON plus a ``diagnosis`` section."""
        return {**self.report.to_dict(), "diagnosis": self.section_dict()}

    def section_dict(self) -> dict[str, Any]:
        return {
            "selection": self.report.selection.label,
            "baseline": self.baseline,
            "verdict": self.verdict,
            "counts": self.counts(),
            "checks": [asdict(c) for c in self.checks],
        }

    def to_polars(self) -> Any:
        """One row per check: layer, name, title, verdict, finding, next."""
        import polars as pl

        keys = ("layer", "name", "title", "verdict", "finding", "next")
        return pl.DataFrame([{k: getattr(c, k) for k in keys} for c in self.checks])


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
        spec = cube_spec([selection] if base is None else [selection, base], EDGES, with_run=False)
        extras = [
            DiagnoseExtra(selection),
            WhatifExtra([SUGGESTED]),
            RunCubeExtra(spec),
            EdgeExtra(EDGES),
        ]
        decoders = run_decoders(store, selection.names, tokenizer)
        tables = class_tables(decoders)  # runs with a tokenizer: the token_classes check
        if tables:
            k = top_size(selection_tokens(selection), T.CLASS_TOP_SHARE, T.CLASS_TOP_LEAST,
                         T.CLASS_TOP_MOST)  # fmt: skip
            extras.append(TokenClassExtra(tables, EDGES, k))
        report = report_on(
            selection, by_gpu=True, workers=workers, on_part=on_part, extras=extras, engine=engine
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
    for check in CHECKS:
        result = check(ctx)
        if result is not None:
            ctx.done[result.name] = result
    return Diagnosis(report, list(ctx.done.values()), baseline)


def run_view(report: Report, run: str, cube: Cube) -> RunView:
    """A run's cube, its steps' rates, split and trend, and its internal localization."""
    rates = step_rates(cube)
    tags = next((r.tags for r in report.selection.runs if r.name == run), {})
    return RunView(
        run, dict(tags), cube, rates, split_steps(cube, rates), trend(cube, rates), localize(cube)
    )


def _baseline_view(
    ctx: Context, base: Selection, spec: CubeSpec, workers: int, engine: Engine
) -> BaselineView:
    target = ctx.cube
    (found,) = read_run_cubes([base], spec, EDGES, workers, engine)
    if target is None or found.tokens == 0:
        from mismatchctl.analysis.selection import empty_selection_error

        raise empty_selection_error(base)
    return BaselineView(
        base.label or ", ".join(base.names), localize(target, found), cube_gpus(found)
    )


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


def layers(d: Diagnosis) -> list[tuple[str, list[Check]]]:
    """The checks grouped by layer, in layer order."""
    return [(name, d.layer(name)) for name in LAYERS if d.layer(name)]


__all__ = ["Diagnosis", "build_diagnosis", "layers"]
