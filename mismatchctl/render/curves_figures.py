"""Plotly figures of the training curves: vllm_kl (log axis, severity bands) overlaid with one
training curve at a time (a menu picks it), the lead-lag correlations, and, for compare, both
sides' curves of one metric aligned on step. Presentation only: the numbers come from
``curves``; every name is HTML-escaped (plotly reads a subset of HTML in names and hover text)."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from mismatchctl.curves.analysis import RunCurves
from mismatchctl.curves.correlate import MIN_LAG_PAIRS, LagPoint
from mismatchctl.curves.series import KL, Series
from mismatchctl.render.figures import _band_shapes, _base, esc
from mismatchctl.render.fmt import num
from mismatchctl.stats import registry as M

KL_COLOUR = "#d62728"
CURVE_COLOUR = "#1f77b4"
SIDE_COLOURS = ("#1f77b4", "#ff7f0e")


def _finite(s: Series, positive: bool = False) -> tuple[list[int], list[float | None]]:
    ys: list[float | None] = []
    for v in s.values.tolist():
        ok = math.isfinite(v) and (v > 0 or not positive)
        ys.append(v if ok else None)
    return s.steps.tolist(), ys


def overlay_order(c: RunCurves) -> list[str]:
    """Curves in menu order: role curves first (reward, grad norm, entropy), then the training
    logs' others, then the remaining dump-derived curves."""
    first = [c.roles[r] for r in ("reward", "grad_norm", "entropy") if r in c.roles]
    logs = sorted(n for n, s in c.series.items() if not s.from_dumps)
    dumps = [n for n, s in c.series.items() if s.from_dumps and n != KL]
    return list(dict.fromkeys([*first, *logs, *dumps]))


def overlay_figure(c: RunCurves) -> go.Figure:
    """vllm_kl per step on a log axis over the severity bands, and one curve on the right axis;
    the menu above the plot switches the curve."""
    fig = go.Figure()
    kx, ky = _finite(c.series[KL], positive=True)
    fig.add_trace(
        go.Scatter(
            x=kx,
            y=ky,
            name=M.VLLM_KL,
            mode="lines+markers",
            marker=dict(size=4, color=KL_COLOUR),
            line=dict(width=1.5, color=KL_COLOUR),
            hovertemplate="step %{x}<br>vllm_kl %{y:.3e}<extra></extra>",
        )
    )
    names = overlay_order(c)
    for i, name in enumerate(names):
        x, y = _finite(c.series[name])
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                name=esc(name),
                yaxis="y2",
                mode="lines",
                visible=i == 0,
                line=dict(width=1.5, color=CURVE_COLOUR),
                hovertemplate=f"step %{{x}}<br>{esc(name)} %{{y:.4g}}<extra></extra>",
            )
        )
    values = [v for v in ky if v is not None]
    lo = math.log10(min([*values, 1e-4])) - 0.3
    hi = math.log10(max([*values, 0.2])) + 0.3
    _band_shapes(fig, lo, hi)
    fig.update_layout(
        yaxis=dict(
            title="vllm_kl (log scale)", type="log", range=[lo, hi], dtick=1, exponentformat="power"
        ),
        yaxis2=dict(title=esc(names[0]) if names else "", overlaying="y", side="right"),
        xaxis=dict(title="step"),
    )
    if len(names) > 1:
        buttons = [
            dict(
                label=esc(name),
                method="update",
                args=[
                    {"visible": [True] + [j == i for j in range(len(names))]},
                    {"yaxis2.title.text": esc(name)},
                ],
            )
            for i, name in enumerate(names)
        ]
        fig.update_layout(
            updatemenus=[dict(buttons=buttons, x=1.0, xanchor="right", y=1.2, yanchor="top")]
        )
    fig = _base(fig, 440)
    fig.update_layout(margin=dict(t=70, r=70))
    return fig


def lead_lag_figure(c: RunCurves) -> go.Figure:
    """Per curve, the correlation of its step-to-step changes with those of vllm_kl at lags
    -5..5 (positive lag: vllm_kl leads), with the 95% interval and pairs in the hover."""
    fig = go.Figure()
    shown = set(overlay_order(c)[:3])
    for link in c.links:
        fig.add_trace(
            go.Scatter(
                x=[p.lag for p in link.lags],
                y=[p.r for p in link.lags],
                name=esc(link.metric),
                mode="lines+markers",
                visible=True if link.metric in shown else "legendonly",
                text=[_lag_hover(p) for p in link.lags],
                hovertemplate=f"{esc(link.metric)}<br>lag %{{x}}: r %{{y:.3f}} (%{{text}})"
                "<extra></extra>",
            )
        )
    fig.add_hline(y=0, line_width=1, line_color="#999")
    fig.update_xaxes(title="lag k (steps): vllm_kl at step s vs the curve at step s + k", dtick=1)
    fig.update_yaxes(title="Pearson r of the step-to-step changes", range=[-1.05, 1.05])
    return _base(fig, 380)


def _lag_hover(p: LagPoint) -> str:
    if p.r is None:
        return f"n = {p.n}; none below {MIN_LAG_PAIRS} pairs"
    return f"n = {p.n}, 95% CI {p.ci_low:+.2f}..{p.ci_high:+.2f}"


def compare_figure(metric: str, sides: list[tuple[str, Series]]) -> go.Figure:
    """One metric of both sides aligned on step (log axis and bands for vllm_kl)."""
    fig = go.Figure()
    is_kl = metric == KL
    values: list[float] = []
    for (label, s), colour in zip(sides, SIDE_COLOURS, strict=False):
        x, y = _finite(s, positive=is_kl)
        values += [v for v in y if v is not None]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                name=esc(label),
                mode="lines+markers" if len(x) <= 200 else "lines",
                marker=dict(size=4),
                line=dict(width=1.5, color=colour),
                text=[num(v) for v in y],
                hovertemplate=f"{esc(label)}<br>step %{{x}}<br>{esc(metric)} %{{text}}"
                "<extra></extra>",
            )
        )
    fig.update_xaxes(title="step")
    if is_kl:
        lo = math.log10(min([*values, 1e-4])) - 0.3
        hi = math.log10(max([*values, 0.2])) + 0.3
        _band_shapes(fig, lo, hi)
        fig.update_yaxes(
            title="vllm_kl (log scale)", type="log", range=[lo, hi], dtick=1, exponentformat="power"
        )
    else:
        fig.update_yaxes(title=esc(metric))
    return _base(fig, 320)
