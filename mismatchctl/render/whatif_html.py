"""The what-if as HTML: a fragment (table and plotly figures: share clipped or rejected per
method or along a threshold sweep, and per step) and a standalone page around it.

Figures use the report's ``data-figure`` JSON blocks, so the fragment draws inside the HTML
report as well as in its own page."""

from __future__ import annotations

import html
from pathlib import Path

import plotly.graph_objects as go

from mismatchctl.analysis.whatif import Whatif
from mismatchctl.engines import plan as K
from mismatchctl.render import html_tables as T
from mismatchctl.render.figures import FONT
from mismatchctl.render.fmt import num, pct
from mismatchctl.render.report_html import figure_block
from mismatchctl.render.standalone_html import standalone_page
from mismatchctl.render.whatif_terminal import method_label, unit_fraction
from mismatchctl.stats import registry as M

HOW_SWEEP = (
    "Share of tokens and of sequences clipped or rejected (left axis) and the effective sample "
    "size of the applied weights (right axis) at each threshold of the sweep."
)
HOW_METHODS = (
    "Share of tokens and of sequences each method clips or rejects on the whole selection; the "
    "effective sample size of its applied weights is in the table above."
)
HOW_STEPS = (
    "Per batch (step): the share of each method's units (tokens or sequences) clipped or "
    "rejected, and the batch's vllm_kl (grey, right axis, log scale)."
)


def whatif_html(w: Whatif) -> str:
    """The fragment: a section titled "What-if corrections"."""
    first = (_sweep_figure(w), HOW_SWEEP) if w.sweep else (_methods_figure(w), HOW_METHODS)
    return (
        '<section id="whatif"><h2>What-if corrections</h2>'
        '<p class="how">Ratios are exp(clamp(log ratio, -20, 20)); raw weights are the unit\'s '
        "untruncated ratio, applied weights what the method multiplies the loss by (0 when "
        "rejected; 0 or 1 for rejection-only methods); ESS = (Σw)² / (n Σw²).</p>"
        f"{_table(w)}{figure_block('whatif-threshold', first[0], first[1])}"
        f"{figure_block('whatif-steps', _steps_figure(w), HOW_STEPS)}</section>"
    )


def write_whatif_html(w: Whatif, path: str | Path) -> None:
    sel = w.report.selection.label or ", ".join(w.report.selection.names)
    page = standalone_page(
        f"mismatchctl what-if: {sel}",
        "What importance-sampling and rejection corrections would do to the tokens and "
        "sequences of the selection (METRICS.md, Correction what-if).",
        whatif_html(w),
    )
    Path(path).write_text(page, encoding="utf-8")


def _table(w: Whatif) -> str:
    headers = ["method", "unit", "action", "tokens", "sequences", "ESS", "raw mean", "raw max"]
    headers += ["applied mean", "applied max"]
    rows = [
        [
            method_label(m), m.info.unit, m.info.action,
            pct(r[M.TOKEN_FRACTION]), pct(r[M.SEQUENCE_FRACTION]), num(r[M.ESS]),
            num(r[M.RAW_MEAN]), num(r[M.RAW_MAX]), num(r[M.WEIGHT_MEAN]), num(r[M.WEIGHT_MAX]),
        ]
        for m, r in zip(w.methods, w.whole().results, strict=True)
    ]  # fmt: skip
    return T.table(headers, rows, left=3)


def _base(fig: go.Figure, ytitle: str) -> go.Figure:
    fig.update_layout(
        template="plotly_white",
        height=380,
        margin=dict(l=70, r=70, t=30, b=60),
        font=dict(family=FONT, size=13),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0.0),
        yaxis=dict(title=ytitle, tickformat=".0%", rangemode="tozero"),
    )
    return fig


def _sweep_figure(w: Whatif) -> go.Figure:
    results = w.whole().results
    x = [m.threshold_text() for m in w.methods]
    fig = go.Figure()
    for key, name in ((M.TOKEN_FRACTION, "tokens"), (M.SEQUENCE_FRACTION, "sequences")):
        fig.add_trace(go.Scatter(x=x, y=[r[key] for r in results], name=name, mode="lines+markers"))
    fig.add_trace(
        go.Scatter(
            x=x, y=[r[M.ESS] for r in results], name="ESS", yaxis="y2",
            mode="lines+markers", line=dict(dash="dot", color="#555"),
        )
    )  # fmt: skip
    _base(fig, "share clipped or rejected")
    fig.update_layout(
        xaxis=dict(title=f"{w.methods[0].name} threshold", type="category"),
        yaxis2=dict(title="ESS", overlaying="y", side="right", range=[0, 1.05]),
    )
    return fig


def _methods_figure(w: Whatif) -> go.Figure:
    results = w.whole().results
    x = [method_label(m) for m in w.methods]
    fig = go.Figure()
    for key, name in ((M.TOKEN_FRACTION, "tokens"), (M.SEQUENCE_FRACTION, "sequences")):
        fig.add_trace(go.Bar(x=x, y=[r[key] for r in results], name=name))
    _base(fig, "share clipped or rejected")
    fig.update_layout(barmode="group", xaxis=dict(type="category"))
    return fig


def _steps_figure(w: Whatif) -> go.Figure:
    groups = w.split(K.RUN, K.STEP)
    runs = list(dict.fromkeys(g.by[K.RUN] for g in groups))
    fig = go.Figure()
    for run in runs:
        mine = [g for g in groups if g.by[K.RUN] == run]
        steps = [g.by[K.STEP] for g in mine]
        prefix = f"{html.escape(str(run))} · " if len(runs) > 1 else ""
        for j, m in enumerate(w.methods):
            y = [unit_fraction(m, g.results[j]) for g in mine]
            fig.add_trace(
                go.Scatter(x=steps, y=y, name=prefix + method_label(m), mode="lines+markers")
            )
        kl = [w.batch_vllm_kl.get((run, s)) for s in steps]
        fig.add_trace(
            go.Scatter(
                x=steps, y=[k if k and k > 0 else None for k in kl], name=prefix + M.VLLM_KL,
                yaxis="y2", mode="lines", line=dict(color="#999", dash="dot"),
            )
        )  # fmt: skip
    _base(fig, "share of units clipped or rejected")
    fig.update_layout(
        xaxis=dict(title="step"),
        yaxis2=dict(title=M.VLLM_KL, overlaying="y", side="right", type="log"),
    )
    return fig
