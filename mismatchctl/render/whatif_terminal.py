"""The terminal view of a what-if: what each correction clips or rejects, its weights, and where
(turn kind, gpu, run, step)."""

from __future__ import annotations

from typing import Any

from rich.console import Group as RGroup
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from mismatchctl.analysis.whatif import Whatif, WhatifGroup
from mismatchctl.engines import plan as K
from mismatchctl.render.fit import fit
from mismatchctl.render.fmt import label, num, pct
from mismatchctl.stats import registry as M
from mismatchctl.stats.whatif import Method

MAX_STEP_ROWS = 30


def method_label(m: Method) -> str:
    return f"{m.name} {m.threshold_text()}"


def unit_fraction(m: Method, metrics: dict[str, Any]) -> float | None:
    """The share of the method's own unit that it clipped or rejected."""
    key = M.SEQUENCE_FRACTION if m.info.unit == "sequence" else M.TOKEN_FRACTION
    return metrics.get(key)


def render_whatif(w: Whatif) -> RenderableType:
    sel = label(w.report.selection.label or ", ".join(w.report.selection.names))
    parts: list[RenderableType] = [
        Text(f"What-if corrections: {sel}", style="bold underline"),
        Text(
            "Ratios exp(clamp(log ratio, -20, 20)); raw = the unit's untruncated ratio; applied ="
            " what the method multiplies the loss by (0 when rejected); ESS = (Σw)² / (n Σw²). "
            "Tables by turn kind, gpu, run and step give the share of the method's unit (token "
            "or sequence) clipped or rejected."
        ),
        _summary(w),
        _weights(w),
    ]
    parts.append(_keyed(w, "By turn kind", K.TURN_KIND))
    if len(w.split(K.GPU)) > 1:
        parts.append(_keyed(w, "By gpu", K.GPU))
    if len(w.split(K.RUN)) > 1:
        parts.append(_keyed(w, "By run", K.RUN))
    parts.append(_steps(w))
    return RGroup(*[RGroup(p, Text("")) for p in parts])


def _summary(w: Whatif) -> RenderableType:
    table = Table(title="Whole selection", title_justify="left")
    for col in ("method", "unit", "action", "tokens", "sequences", "ESS", "ESS raw"):
        table.add_column(col, justify="left" if col in ("method", "unit", "action") else "right")
    whole = w.whole()
    for m, r in zip(w.methods, whole.results, strict=True):
        table.add_row(
            method_label(m),
            m.info.unit,
            m.info.action,
            pct(r[M.TOKEN_FRACTION]),
            pct(r[M.SEQUENCE_FRACTION]),
            num(r[M.ESS]),
            num(r[M.ESS_RAW]),
        )
    return fit(table)


def _weights(w: Whatif) -> RenderableType:
    table = Table(title="Weights (raw -> applied)", title_justify="left")
    table.add_column("method")
    for side in ("raw", "weight"):
        for stat in ("mean", "std", "min", "max"):
            table.add_column(f"{'applied' if side == 'weight' else side} {stat}", justify="right")
    for m, r in zip(w.methods, w.whole().results, strict=True):
        cells = [
            num(r[f"{side}_{stat}"])
            for side in ("raw", "weight")
            for stat in ("mean", "std", "min", "max")
        ]
        table.add_row(method_label(m), *cells)
    return fit(table)


def _keyed(w: Whatif, title: str, key: str) -> RenderableType:
    groups = w.split(key)
    table = Table(title=title, title_justify="left")
    table.add_column("method")
    for g in groups:
        table.add_column(label(g.by[key]), justify="right")
    for j, m in enumerate(w.methods):
        table.add_row(method_label(m), *(pct(unit_fraction(m, g.results[j])) for g in groups))
    return fit(table)


def _steps(w: Whatif) -> RenderableType:
    rows: list[WhatifGroup] = w.split(K.RUN, K.STEP)
    half = MAX_STEP_ROWS // 2
    shown = rows if len(rows) <= MAX_STEP_ROWS else rows[:half] + rows[-half:]
    title = "Per step"
    if len(shown) < len(rows):
        title += f" (first and last {half} of {len(rows)} batches; all in --json / --html)"
    table = Table(title=title, title_justify="left")
    multi = len(w.split(K.RUN)) > 1
    if multi:
        table.add_column("run")
    table.add_column("step", justify="right")
    table.add_column(M.VLLM_KL, justify="right")
    for m in w.methods:
        table.add_column(method_label(m), justify="right")
    for g in shown:
        run, step = g.by[K.RUN], g.by[K.STEP]
        cells = [pct(unit_fraction(m, r)) for m, r in zip(w.methods, g.results, strict=True)]
        lead = [Text(label(run))] if multi else []
        table.add_row(*lead, str(step), num(w.batch_vllm_kl.get((run, step))), *cells)
    return fit(table, 2 if multi else 1)
