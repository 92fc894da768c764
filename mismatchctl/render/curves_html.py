"""The "Training curves" section of the HTML report: per run, the overlay of vllm_kl with each
curve, the lead-lag figure, the correlation table, the events, the join notes and the per-step
table. Every string goes through ``html.escape``."""

from __future__ import annotations

import html
from collections.abc import Callable

import plotly.graph_objects as go

from mismatchctl.curves.analysis import RunCurves
from mismatchctl.curves.series import KL
from mismatchctl.render import curves_figures as F
from mismatchctl.render import curves_rows as R
from mismatchctl.render.html_tables import band_cell, kl_cell, table

MAX_HTML_STEPS = 500
HOW_OVERLAY = (
    "vllm_kl of each batch (red, left axis, log scale, over the severity bands) and one training "
    "curve (blue, right axis): pick the curve in the menu. The studies read spikes of vllm_kl "
    "against spikes of entropy, trainer perplexity and gradient norm, and a vllm_kl rise before "
    "the reward collapses."
)
HOW_LAGS = (
    "Pearson correlation of vllm_kl at step s with each curve at step s + k, over the steps "
    "both have. A peak at k &gt; 0 means vllm_kl moves first (it leads the curve by k steps); "
    "k &lt; 0 means the curve moves first. Click a legend entry to show or hide a curve."
)

FigureBlock = Callable[[str, go.Figure, str], str]


def curves_body(curves: dict[str, RunCurves], figure_block: FigureBlock) -> str:
    parts = []
    for i, c in enumerate(curves.values()):
        parts.append(f"<h3>{html.escape(c.run)}</h3>")
        parts += [f'<p class="note">{html.escape(n)}</p>' for n in R.join_notes(c)]
        parts.append(figure_block(f"curves-{i}", F.overlay_figure(c), HOW_OVERLAY))
        if c.links:
            parts.append(figure_block(f"lags-{i}", F.lead_lag_figure(c), HOW_LAGS))
            parts.append(table(list(R.LINK_COLUMNS), R.link_rows(c), left=2))
        parts.append(
            "<ul class='events'>"
            + "".join(f"<li>{html.escape(line)}</li>" for line in R.event_lines(c))
            + "</ul>"
        )
        parts.append(step_table(c))
    return "".join(parts) or '<p class="note">No steps.</p>'


def step_table(c: RunCurves) -> str:
    """Every step (up to MAX_HTML_STEPS, then the terminal's choice of steps) with every curve."""
    steps = sorted({int(s) for s in c.series[KL].steps} | set(c.log_steps))
    note = ""
    if len(steps) > MAX_HTML_STEPS:
        steps, note = R.table_steps(c)
    names = [KL, *[n for n in F.overlay_order(c)]]
    rows = []
    for step in steps:
        b = R.step_band(c, step)
        row = [str(step), kl_cell(R.value_at(c.series[KL], step), b), band_cell(b)]
        row += [R.cell(R.value_at(c.series[n], step)) for n in names[1:]]
        rows.append(row)
    caption = f'<p class="note">{html.escape(note)}</p>' if note else ""
    scroll = f'<div class="scroll">{table(["step", KL, "band", *names[1:]], rows)}</div>'
    return caption + scroll
