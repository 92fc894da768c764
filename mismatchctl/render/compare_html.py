"""The HTML comparison: per-step curves of both sides overlaid, per-bin bars, the two sides'
log-ppl scatters side by side, and the comparison tables. One self-contained page."""

from __future__ import annotations

import html
import math
from pathlib import Path

import plotly.graph_objects as go

from mismatchctl.analysis.compare import Comparison
from mismatchctl.curves.series import KL
from mismatchctl.render import curves_figures as CF
from mismatchctl.render import curves_rows as CR
from mismatchctl.render import figures as F
from mismatchctl.render.compare_rows import bins_rows, gap_rows, headline_rows, keyed_rows
from mismatchctl.render.html_tables import Cell, table
from mismatchctl.render.report_html import figure_block
from mismatchctl.render.standalone_html import standalone_page
from mismatchctl.stats import bin_label

SIDE_COLOURS = {"a": "#1f77b4", "b": "#d62728"}


def write_comparison_html(c: Comparison, path: str | Path) -> None:
    Path(path).write_text(comparison_html(c), encoding="utf-8")


def comparison_html(c: Comparison) -> str:
    a, b = c.a.selection.label, c.b.selection.label
    parts = [
        _section("verdict", "Verdict", _verdicts(c) + _headline(c)),
        _section("config", "Configuration that differs", _config(c)),
        _section(
            "steps",
            "Per-step vllm_kl, both sides",
            figure_block(
                "cmp-steps",
                steps_overlay(c),
                "vllm_kl of each batch (step) of side A and side B on a log axis, over the severity "
                "bands; steps are aligned on their numbers.",
            ),
        ),
        _section(
            "bins",
            "By inference probability",
            figure_block(
                "cmp-bins",
                bins_bars(c),
                "vllm_kl of each p_infer bin for both sides (log scale); the table below adds each "
                "bin's share of tokens and of the K3 mass.",
            )
            + _bins_table(c),
        ),
        _section("gap", "Where the gap lives", _gap(c)),
        _section(
            "turns",
            "By turn kind and gpu",
            _keyed(c.turn_kinds, "turn_kind") + _keyed(c.gpus, "gpu"),
        ),
    ]
    if c.a.figures is not None and c.b.figures is not None:
        scatters = "".join(
            f'<div class="col"><h3>{side.upper()}: {html.escape(rep.selection.label)}</h3>'
            + figure_block(f"cmp-ppl-{side}", F.log_ppl_figure(rep.figures, rep), "")
            + "</div>"
            for side, rep in (("a", c.a), ("b", c.b))
        )
        parts.append(
            _section(
                "scatter",
                "Log-perplexity of segments, side by side",
                f'<div class="cols">{scatters}</div>',
            )
        )
    if c.curves:
        parts.append(_section("curves", "Training curves, both sides", _curves(c)))
    notes = "".join(f'<p class="note">{html.escape(n)}</p>' for n in c.notes)
    return standalone_page(
        f"mismatchctl compare: {a} vs {b}", f"A = {a}, B = {b}", notes + "".join(parts)
    )


MAX_CURVE_FIGURES = 12


def _curves(c: Comparison) -> str:
    """vllm_kl, the role curves and the training-log curves of both sides (up to
    MAX_CURVE_FIGURES figures), then the table of every paired curve."""
    figures = [
        p
        for p in c.curves
        if p.a is not None
        and p.b is not None
        and (p.metric == KL or not (p.a.series.from_dumps and p.b.series.from_dumps))
    ]
    body = ""
    for i, p in enumerate(figures[:MAX_CURVE_FIGURES]):
        traces = [(f"A: {p.a.label}", p.a.series), (f"B: {p.b.label}", p.b.series)]
        body += f"<h3>{html.escape(p.metric)}</h3>" + figure_block(
            f"cmp-curve-{i}", CF.compare_figure(p.metric, traces), ""
        )
    if len(figures) > MAX_CURVE_FIGURES:
        body += (
            f'<p class="note">{len(figures) - MAX_CURVE_FIGURES} more paired curves in the '
            "table below and in --json.</p>"
        )
    return body + table(list(CR.CURVE_PAIR_HEADERS), CR.curve_pair_rows(c.curves))


def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{html.escape(title)}</h2>{body}</section>'


def steps_overlay(c: Comparison) -> go.Figure:
    fig = go.Figure()
    values = []
    for side, key in (("a", "a_vllm_kl"), ("b", "b_vllm_kl")):
        rows = [r for r in c.steps if _positive(r[key]) is not None]
        values += [r[key] for r in rows]
        name = (c.a if side == "a" else c.b).selection.label
        fig.add_trace(
            go.Scatter(
                x=[r["step"] for r in rows],
                y=[r[key] for r in rows],
                mode="lines+markers",
                name=f"{side.upper()}: {F.esc(name)}",
                line=dict(color=SIDE_COLOURS[side], width=1.5),
                marker=dict(size=5),
            )
        )
    lo = math.log10(min([*values, 1e-4])) - 0.3
    hi = math.log10(max([*values, 0.2])) + 0.3
    F._band_shapes(fig, lo, hi)
    fig.update_xaxes(title="step")
    fig.update_yaxes(
        title="vllm_kl per batch (log scale)", type="log", range=[lo, hi], exponentformat="power"
    )
    return F._base(fig, 420)


def bins_bars(c: Comparison) -> go.Figure:
    labels = [bin_label(c.a.bin_edges, int(r["bin"])) for r in c.bins]
    fig = go.Figure()
    for side in ("a", "b"):
        name = (c.a if side == "a" else c.b).selection.label
        fig.add_trace(
            go.Bar(
                x=labels,
                y=[_positive(r[f"{side}_vllm_kl"]) for r in c.bins],
                name=f"{side.upper()}: {F.esc(name)}",
                marker_color=SIDE_COLOURS[side],
            )
        )
    fig.update_layout(barmode="group")
    fig.update_xaxes(title="p_infer bin")
    fig.update_yaxes(title="vllm_kl (log scale)", type="log", exponentformat="power")
    return F._base(fig, 420)


def _positive(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) and x > 0 else None


def _verdicts(c: Comparison) -> str:
    items = "".join(
        f'<li class="{"sig" if r.get("significant") else ""}">{html.escape(r["verdict"])}</li>'
        for r in c.headline
        if "verdict" in r
    )
    return f"<ul class='verdicts'>{items}</ul>"


def _headline(c: Comparison) -> str:
    headers, rows = headline_rows(c)
    cells = [
        [Cell(row[0], "sig" if r.get("significant") else ""), *row[1:]]
        for row, r in zip(rows, c.headline, strict=True)
    ]
    return table(headers, cells)


def _config(c: Comparison) -> str:
    if not c.config:
        return "<p>No tag differs between the two sides.</p>"
    return table(
        ["tag", "A", "B"], [[r["key"], r["a"] or "-", r["b"] or "-"] for r in c.config], left=3
    )


def _bins_table(c: Comparison) -> str:
    return table(*bins_rows(c))


def _gap(c: Comparison) -> str:
    return (
        "<p class='how'>Each (turn kind, p_infer bin) cell's K3 sum per token of its side, B minus A: "
        "the contributions add up to vllm_kl(B) − vllm_kl(A).</p>" + table(*gap_rows(c), left=2)
    )


def _keyed(rows: list[dict], key: str) -> str:
    return table(*keyed_rows(rows, key))
