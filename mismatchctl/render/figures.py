"""Plotly figures of the HTML pages, one builder per kind of ``Figure`` section.

Nothing here computes a metric: densities, samples and every number come from the section's
data. What happens here is presentation: coordinates (the axes' transforms), axis ranges fitted
to the data, log colour of counts, tick labels, colours (the Okabe-Ito palette, safe for colour
blindness, one colour per run or side; a figure of more lines than its eight colours goes on
with Kelly's, then hues a golden turn apart: no two lines share a colour), and thinning of very
long step series to a point budget (keeping each bucket's worst batch, so spikes stay visible). Every data string is HTML-escaped:
plotly reads a subset of HTML in trace names and hover text.
"""

from __future__ import annotations

import colorsys
import html
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import plotly.graph_objects as go

from mismatchctl.analysis import sections as sec
from mismatchctl.analysis.bisect.view import BisectPlot
from mismatchctl.analysis.compare.compare import Comparison
from mismatchctl.analysis.compare.curves import CurvePair
from mismatchctl.analysis.report import figure_data as FD
from mismatchctl.analysis.routing.routing import FirstFlipPlot
from mismatchctl.analysis.whatif.view import method_label, steps_by_run, unit_fraction
from mismatchctl.analysis.whatif.whatif import Whatif
from mismatchctl.curves.analysis import RunCurves
from mismatchctl.curves.correlate import MIN_LAG_PAIRS, LagPoint
from mismatchctl.curves.series import KL, Series
from mismatchctl.display import number, percent, visible
from mismatchctl.stats import registry as M
from mismatchctl.stats.density import Axis, Density2D

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
# Okabe & Ito (2008): distinguishable with every common colour-vision deficiency.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
# Kelly (1965), colours of maximum contrast, less those close to an Okabe-Ito one: lines 9 to 19.
KELLY = ("#BE0032", "#8DB600", "#875692", "#848482", "#882D17", "#C2B280", "#604E97", "#B3446C",
         "#F99379", "#654522", "#2B3D26")  # fmt: skip
GOLDEN = (5**0.5 - 1) / 2  # hues a golden turn apart never repeat
BLUES = [[0.0, "#d6e6f4"], [0.5, "#4a90c2"], [1.0, "#08306b"]]
GREYS = [[0.0, "#ececec"], [1.0, "#4d4d4d"]]
KIND_COLOURS = {"first": PALETTE[0], "later": PALETTE[3]}
KIND_NAMES = {"first": "first turn", "later": "later turns"}
BAND_FILL = {
    "low": "rgba(0,158,115,0.10)",
    "medium": "rgba(240,228,66,0.16)",
    "high": "rgba(230,159,0,0.14)",
    "severe": "rgba(213,94,0,0.14)",
}
BANDS = (("low", 1e-3), ("medium", 2e-2), ("high", 1e-1), ("severe", math.inf))
MEAN_COLOUR = PALETTE[3]
STEP_POINT_BUDGET = 100_000  # per figure, over all its series: bounds the page size
DENSE_POINTS = 200  # a series of more points is drawn as a line without markers
MIN_POINTS_PER_SERIES = 500
MASS_KEPT = 0.998  # a density's axis range covers the cells holding this share of its counts


def esc(value: object) -> str:
    return html.escape("(none)" if value is None else visible(value))


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def palette(n: int) -> list[str]:
    """``n`` colours, one per line of a figure, distinct up to about two thousand: Okabe-Ito's
    eight, then Kelly's, then hues a golden turn apart (dark and mid lightness in turn)."""
    out = [*PALETTE, *KELLY][:n]
    seen = set(out)
    for k in range(8 * n):  # bounded: 8-bit colours run out after some thousands of lines
        if len(out) == n:
            break
        r, g, b = colorsys.hls_to_rgb((k * GOLDEN) % 1.0, 0.5 if k % 2 else 0.35, 0.75)
        hexed = f"#{round(r * 255):02X}{round(g * 255):02X}{round(b * 255):02X}"
        if hexed not in seen:
            seen.add(hexed)
            out.append(hexed)
    return [out[i % len(out)] for i in range(n)]


def build(fig: sec.Figure) -> go.Figure:
    """The plotly figure of a ``Figure`` section."""
    return BUILDERS[fig.kind](fig.data)


def _base(fig: go.Figure, height: int) -> go.Figure:
    fig.update_layout(
        template="plotly_white",
        height=height,
        margin=dict(l=70, r=30, t=30, b=60),
        font=dict(family=FONT, size=13),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0.0),
        hoverlabel=dict(font=dict(family=FONT)),
        colorway=list(PALETTE),
    )
    return fig


def _log_ticks(lo: float, hi: float) -> dict:
    """Decade ticks of a log10 axis over [lo, hi], labelled in raw values."""
    decades = range(math.ceil(lo), math.floor(hi) + 1)
    return dict(tickvals=list(decades), ticktext=[_decade(d) for d in decades])


def _decade(d: int) -> str:
    return f"{10.0**d:g}" if -2 <= d <= 2 else f"1e{d}"


def _asinh_ticks(axis: Axis) -> dict:
    """Signed decade ticks of an asinh axis (0, ±scale, ±10 scale, ...) inside its range."""
    mags = [axis.scale * 10.0**i for i in range(8) if axis.scale * 10.0**i <= axis.inverse(axis.hi)]
    values = [-m for m in reversed(mags)] + [0.0] + mags
    return dict(
        tickvals=axis.forward(np.array(values)).tolist(), ticktext=[f"{v:g}" for v in values]
    )


def _heatmap(d: Density2D, colorscale: list, hover: str, name: str) -> go.Heatmap:
    """Counts on a log colour scale; empty cells are transparent."""
    counts = d.counts.T  # plotly rows are y
    with np.errstate(divide="ignore"):
        z = np.where(counts > 0, np.log10(counts), np.nan).astype(np.float32)
    top = max(1.0, float(np.nanmax(z)) if np.isfinite(z).any() else 1.0)
    ticks = list(range(math.floor(top) + 1))
    return go.Heatmap(
        x=(d.x.edges[:-1] + d.x.edges[1:]) / 2,
        y=(d.y.edges[:-1] + d.y.edges[1:]) / 2,
        z=z,
        zmin=0.0,
        zmax=top,
        customdata=counts.astype(np.int32),
        colorscale=colorscale,
        colorbar=dict(title=dict(text="count", side="right"), tickvals=ticks,
                      ticktext=[f"{10**t:,}" for t in ticks], thickness=12),
        hovertemplate=hover + "<br>%{customdata:,} " + name + "<extra></extra>",
        name=name,
        showlegend=False,
    )  # fmt: skip


def fitted(d: Density2D, axis: int, pad: int = 2) -> list[float]:
    """The range (transformed coordinate) of the rows or columns holding ``MASS_KEPT`` of the
    counts (the outliers' cells are still drawn, just off the fitted view), padded a little."""
    a = d.x if axis == 0 else d.y
    mass = d.counts.sum(axis=1 - axis).astype(np.float64)
    if mass.sum() == 0:
        return [a.lo, a.hi]
    cdf = np.cumsum(mass) / mass.sum()
    tail = (1.0 - MASS_KEPT) / 2
    first = int(np.searchsorted(cdf, tail, side="right"))
    last = int(np.searchsorted(cdf, 1.0 - tail, side="left"))
    edges = a.edges
    return [float(edges[max(0, first - pad)]), float(edges[min(a.bins, last + 1 + pad)])]


# --- a run's distributions ----------------------------------------------------------------------


def mismatch_figure(p: FD.MismatchPlot) -> go.Figure:
    fig = go.Figure(_heatmap(p.density, BLUES, "p_infer ≈ 10^%{x:.2f}", "tokens"))
    for trace in _bin_traces(p.bins):
        fig.add_trace(trace)
    x = FD.P_INFER_LOG
    x_range = fitted(p.density, 0)
    y_range = fitted(p.density, 1)
    r1 = float(FD.LOG_RATIO.forward(1e-3))
    fig.add_hline(y=0, line=dict(color="#888", width=1))
    fig.update_xaxes(title="inference probability p_infer (log scale)",
                     range=[x_range[0], x.hi + 0.15], **_log_ticks(x.lo, x.hi))  # fmt: skip
    fig.update_yaxes(title="r = trainer − rollout logprob (symlog)",
                     range=[min(y_range[0], -r1), max(y_range[1], r1)], zeroline=False,
                     **_asinh_ticks(FD.LOG_RATIO))  # fmt: skip
    return _base(fig, 520)


def _bin_traces(bins: list[FD.BinBox]) -> list[go.Scatter]:
    """Per probability bin: a p01–p99 box and the mean of r across the bin."""
    box_x: list[float | None] = []
    box_y: list[float | None] = []
    mean_x: list[float | None] = []
    mean_y: list[float | None] = []
    hx, hy, htext = [], [], []
    ax, ay = FD.P_INFER_LOG, FD.LOG_RATIO
    for b in bins:
        m = b.metrics
        if None in (m.get(M.LOG_RATIO_MEAN), m.get(M.LOG_RATIO_P01), m.get(M.LOG_RATIO_P99)):
            continue
        x0, x1 = (float(np.clip(ax.forward(e), ax.lo, 0.0)) for e in (b.lo, b.hi))
        lo, hi, mean = (
            float(ay.forward(m[n])) for n in (M.LOG_RATIO_P01, M.LOG_RATIO_P99, M.LOG_RATIO_MEAN)
        )
        box_x += [x0, x1, x1, x0, x0, None]
        box_y += [lo, lo, hi, hi, lo, None]
        mean_x += [x0, x1, None]
        mean_y += [mean, mean, None]
        hx.append((x0 + x1) / 2)
        hy.append(mean)
        htext.append(_bin_hover(b))
    return [
        go.Scatter(x=box_x, y=box_y, fill="toself", fillcolor="rgba(213,94,0,0.12)", mode="lines",
                   line=dict(color="rgba(213,94,0,0.55)", width=1, dash="dot"),
                   name="p01–p99 of r per bin", hoverinfo="skip"),
        go.Scatter(x=mean_x, y=mean_y, mode="lines", line=dict(color=MEAN_COLOUR, width=2.5),
                   name="mean r per bin", hoverinfo="skip"),
        go.Scatter(x=hx, y=hy, mode="markers", marker=dict(color=MEAN_COLOUR, size=7), text=htext,
                   hovertemplate="%{text}<extra></extra>", showlegend=False),
    ]  # fmt: skip


def _bin_hover(b: FD.BinBox) -> str:
    m = b.metrics
    return "<br>".join(
        [
            f"<b>p_infer in {html.escape(b.label)}</b>",
            f"tokens {number(m.get(M.TOKENS))} ({percent(m.get(M.TOKEN_SHARE))})",
            f"vllm_kl {number(m.get(M.VLLM_KL))} (kl share {percent(m.get(M.KL_SHARE))})",
            f"mean r {number(m.get(M.LOG_RATIO_MEAN))}",
            f"p01 / p50 / p99 r {number(m.get(M.LOG_RATIO_P01))} / "
            f"{number(m.get(M.LOG_RATIO_P50))} / {number(m.get(M.LOG_RATIO_P99))}",
        ]
    )


def probs_figure(p: FD.ProbsPlot) -> go.Figure:
    fig = go.Figure(_heatmap(p.density, BLUES, "p_infer %{x:.3f}<br>p_train %{y:.3f}", "tokens"))
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", line=dict(color="#555", dash="dash", width=1),
                             name=f"p_train = p_infer  (Pearson r = {number(p.pearson, 6)})",
                             hoverinfo="skip"))  # fmt: skip
    fig.update_xaxes(title="inference probability p_infer", range=[0, 1], constrain="domain")
    fig.update_yaxes(title="trainer probability p_train", range=[0, 1], scaleanchor="x")
    return _base(fig, 560)


def log_ppl_figure(p: FD.LogPplPlot) -> go.Figure:
    fd = p.data
    fig = go.Figure(_heatmap(fd.log_ppl, GREYS,
                             "rollout log-ppl ≈ 10^%{x:.2f}<br>trainer log-ppl ≈ 10^%{y:.2f}",
                             "segments"))  # fmt: skip
    for kind in fd.kind_labels:
        fig.add_trace(_sample_trace(fd, kind, p.kinds.get(kind, {})))
    lo_x, lo_y = fitted(fd.log_ppl, 0), fitted(fd.log_ppl, 1)
    both = [min(lo_x[0], lo_y[0]), max(lo_x[1], lo_y[1])]
    fig.add_trace(go.Scatter(x=both, y=both, mode="lines", line=dict(color="#555", dash="dash", width=1),
                             name="trainer = rollout", hoverinfo="skip"))  # fmt: skip
    ticks = _log_ticks(both[0], both[1])
    fig.update_xaxes(title="rollout log-ppl = −mean(rollout logprob) (log scale)", range=both,
                     **ticks)  # fmt: skip
    fig.update_yaxes(title="trainer log-ppl = −mean(trainer logprob) (log scale)", range=both,
                     scaleanchor="x", **ticks)  # fmt: skip
    return _base(fig, 580)


def _sample_trace(fd: FD.FigureData, kind: str, metrics: dict) -> go.Scatter:
    idx = fd.sample_kind(kind)
    s, axis = fd.sample, FD.LOG_PPL
    x = np.clip(axis.forward(s.rollout_log_ppl[idx]), axis.lo, axis.hi)
    y = np.clip(axis.forward(s.trainer_log_ppl[idx]), axis.lo, axis.hi)
    text = [
        f"run {esc(s.run[i])}, step {s.step[i]}, seq {s.seq[i]}<br>{s.tokens[i]} tokens<br>"
        f"rollout log-ppl {number(float(s.rollout_log_ppl[i]))}<br>"
        f"trainer log-ppl {number(float(s.trainer_log_ppl[i]))}"
        for i in idx.tolist()
    ]
    name = (
        f"{KIND_NAMES[kind]}: Pearson r = {number(metrics.get(M.LOG_PPL_PEARSON), 6)} "
        f"({number(metrics.get(M.SEQUENCES))} segments, {len(idx):,} drawn)"
    )
    return go.Scatter(x=x, y=y, mode="markers", name=name, text=text,
                      marker=dict(color=KIND_COLOURS[kind], size=5, opacity=0.7, line=dict(width=0)),
                      hovertemplate="%{text}<extra>" + KIND_NAMES[kind] + "</extra>")  # fmt: skip


# --- per-step vllm_kl -------------------------------------------------------------------------


def steps_figure(p: FD.StepsPlot) -> go.Figure:
    """Per-batch vllm_kl of each run (or gpu) on a log axis, severity bands shaded."""
    budget = max(MIN_POINTS_PER_SERIES, STEP_POINT_BUDGET // max(1, len(p.lines)))
    fig = go.Figure()
    values: list[float] = []
    colours = palette(len(p.lines))
    for i, line in enumerate(p.lines):
        keep = thin(line.values, budget)
        xs = [line.steps[j] for j in keep]
        ys = [_positive(line.values[j]) for j in keep]
        values += [v for v in ys if v is not None]
        name = f"{p.key} {esc(line.name)}"
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode=line_mode(len(xs)), name=name, marker=dict(size=5, color=colours[i]),
            line=dict(width=1.5, color=colours[i]),
            text=[f"{name}<br>step {line.steps[j]}<br>vllm_kl {number(line.values[j])} "
                  f"({line.bands[j] or '-'})" for j in keep],
            hovertemplate="%{text}<extra></extra>",
        ))  # fmt: skip
    lo, hi = _kl_range(values)
    band_shapes(fig, lo, hi)
    fig.update_xaxes(title="step")
    fig.update_yaxes(title="vllm_kl per batch (log scale)", type="log", range=[lo, hi], dtick=1,
                     exponentformat="power")  # fmt: skip
    return _base(fig, 420)


def _kl_range(values: list[float]) -> tuple[float, float]:
    """A log10 range around the values (and a little of the bands around them)."""
    if not values:
        return -4.3, -0.4
    return math.log10(min(values)) - 0.3, math.log10(max(values)) + 0.3


def line_mode(points: int) -> str:
    """Markers on a line of a few points; a line alone when dense (a thousand steps' markers
    hide the line)."""
    return "lines+markers" if points <= DENSE_POINTS else "lines"


def thin(values: list, budget: int) -> list[int]:
    """At most ``budget`` indices in order: per equal bucket, the one with the largest value
    (missing values count as lowest), so the spikes are what remains."""
    if len(values) <= budget:
        return list(range(len(values)))
    return [
        max(bucket.tolist(), key=lambda i: _sortable(values[i]))
        for bucket in np.array_split(np.arange(len(values)), budget)
    ]


def _sortable(x: float | None) -> float:
    return -math.inf if x is None or math.isnan(x) else x


def _positive(x: float | None) -> float | None:
    """A log axis cannot show 0, NaN or infinity: those batches are gaps."""
    return x if x is not None and math.isfinite(x) and x > 0 else None


def band_shapes(fig: go.Figure, lo: float, hi: float) -> None:
    lower = 10.0**lo
    for name, upper in BANDS:
        top = min(upper, 10.0**hi)
        if top <= lower:
            continue
        fig.add_hrect(y0=lower, y1=top, fillcolor=BAND_FILL[name], line_width=0, layer="below")
        fig.add_annotation(x=1.0, xref="paper", xanchor="right", y=math.log10(top), yref="y",
                           yanchor="top", text=name, showarrow=False,
                           font=dict(size=11, color="#666"))  # fmt: skip
        lower = top


# --- training curves ------------------------------------------------------------------------------


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
    fig.add_trace(go.Scatter(x=kx, y=ky, name=M.VLLM_KL, mode=line_mode(len(kx)),
                             marker=dict(size=4, color=PALETTE[3]), line=dict(width=1.5, color=PALETTE[3]),
                             hovertemplate="step %{x}<br>vllm_kl %{y:.3e}<extra></extra>"))  # fmt: skip
    names = overlay_order(c)
    for i, name in enumerate(names):
        x, y = _finite(c.series[name])
        fig.add_trace(go.Scatter(x=x, y=y, name=esc(name), yaxis="y2", mode="lines", visible=i == 0,
                                 line=dict(width=1.5, color=PALETTE[0]),
                                 hovertemplate=f"step %{{x}}<br>{esc(name)} %{{y:.4g}}<extra></extra>"))  # fmt: skip
    lo, hi = _kl_range([v for v in ky if v is not None])
    band_shapes(fig, lo, hi)
    fig.update_layout(
        yaxis=dict(title="vllm_kl (log scale)", type="log", range=[lo, hi], dtick=1, exponentformat="power"),
        yaxis2=dict(title=esc(names[0]) if names else "", overlaying="y", side="right"),
        xaxis=dict(title="step"),
    )  # fmt: skip
    if len(names) > 1:
        buttons = [
            dict(label=esc(name), method="update",
                 args=[{"visible": [True] + [j == i for j in range(len(names))]},
                       {"yaxis2.title.text": esc(name)}])
            for i, name in enumerate(names)
        ]  # fmt: skip
        fig.update_layout(
            updatemenus=[dict(buttons=buttons, x=1.0, xanchor="right", y=1.2, yanchor="top")]
        )
    fig = _base(fig, 420)
    fig.update_layout(margin=dict(t=70, r=70))
    return fig


def lead_lag_figure(c: RunCurves) -> go.Figure:
    """Per curve, the correlation of its step-to-step changes with those of vllm_kl at lags
    -5..5 (positive lag: vllm_kl leads), with the 95% interval and pairs in the hover."""
    fig = go.Figure()
    shown = set(overlay_order(c)[:3])
    colours = palette(len(c.links))
    for link, hue in zip(c.links, colours, strict=True):
        fig.add_trace(go.Scatter(
            x=[p.lag for p in link.lags], y=[p.r for p in link.lags], name=esc(link.metric),
            mode="lines+markers", visible=True if link.metric in shown else "legendonly",
            line=dict(color=hue), marker=dict(color=hue),
            text=[_lag_hover(p) for p in link.lags],
            hovertemplate=f"{esc(link.metric)}<br>lag %{{x}}: r %{{y:.3f}} (%{{text}})<extra></extra>",
        ))  # fmt: skip
    fig.add_hline(y=0, line_width=1, line_color="#999")
    fig.update_xaxes(title="lag k (steps): vllm_kl at step s vs the curve at step s + k", dtick=1)
    fig.update_yaxes(title="Pearson r of the step-to-step changes", range=[-1.05, 1.05])
    return _base(fig, 360)


def _lag_hover(p: LagPoint) -> str:
    if p.r is None:
        return f"n = {p.n}; none below {MIN_LAG_PAIRS} pairs"
    return f"n = {p.n}, 95% CI {p.ci_low:+.2f}..{p.ci_high:+.2f}"


def compare_curve_figure(p: CurvePair) -> go.Figure:
    """One metric of both sides aligned on step (log axis and bands for vllm_kl)."""
    assert p.a is not None and p.b is not None
    sides = [(f"A: {p.a.label}", p.a.series), (f"B: {p.b.label}", p.b.series)]
    fig = go.Figure()
    is_kl = p.metric == KL
    values: list[float] = []
    for i, (label, s) in enumerate(sides):
        x, y = _finite(s, positive=is_kl)
        values += [v for v in y if v is not None]
        fig.add_trace(go.Scatter(
            x=x, y=y, name=esc(label), mode=line_mode(len(x)),
            marker=dict(size=4), line=dict(width=1.5, color=colour(i)), text=[number(v) for v in y],
            hovertemplate=f"{esc(label)}<br>step %{{x}}<br>{esc(p.metric)} %{{text}}<extra></extra>",
        ))  # fmt: skip
    fig.update_xaxes(title="step")
    if is_kl:
        lo, hi = _kl_range(values)
        band_shapes(fig, lo, hi)
        fig.update_yaxes(title="vllm_kl (log scale)", type="log", range=[lo, hi], dtick=1,
                         exponentformat="power")  # fmt: skip
    else:
        fig.update_yaxes(title=esc(p.metric))
    return _base(fig, 320)


# --- compare -------------------------------------------------------------------------------------


def compare_steps_figure(c: Comparison) -> go.Figure:
    fig = go.Figure()
    values: list[float] = []
    for i, (side, rep) in enumerate((("a", c.a), ("b", c.b))):
        rows = [r for r in c.steps if _positive(getattr(r, f"{side}_vllm_kl")) is not None]
        ys = [getattr(r, f"{side}_vllm_kl") for r in rows]
        values += ys
        fig.add_trace(go.Scatter(x=[r.step for r in rows], y=ys, mode=line_mode(len(rows)),
                                 name=f"{side.upper()}: {esc(rep.selection.label)}",
                                 line=dict(color=colour(i), width=1.5), marker=dict(size=5)))  # fmt: skip
    lo, hi = _kl_range(values)
    band_shapes(fig, lo, hi)
    fig.update_xaxes(title="step")
    fig.update_yaxes(title="vllm_kl per batch (log scale)", type="log", range=[lo, hi],
                     exponentformat="power")  # fmt: skip
    return _base(fig, 400)


def compare_bins_figure(p: FD.CompareBins) -> go.Figure:
    """vllm_kl per bin of both sides; a bin holding almost no token of a side is drawn hatched
    and faint, and named so in the hover, instead of as a bar to read."""
    fig = go.Figure()
    for i, side in enumerate(p.sides):
        ys = [_positive(v) for v in side.values]
        fig.add_trace(go.Bar(
            x=p.labels, y=ys, name=f"{'AB'[i]}: {esc(side.label)}", marker_color=colour(i),
            marker_opacity=[0.25 if s else 1.0 for s in side.sparse],
            marker_pattern_shape=["/" if s else "" for s in side.sparse],
            text=[f"{number(v)}{' (almost no tokens)' if s else ''}" for v, s in zip(side.values, side.sparse, strict=True)],
            hovertemplate="%{x}<br>vllm_kl %{text}<extra></extra>", textposition="none",
        ))  # fmt: skip
    fig.update_layout(barmode="group")
    fig.update_xaxes(title="p_infer bin")
    fig.update_yaxes(title="vllm_kl (log scale)", type="log", exponentformat="power")
    return _base(fig, 400)


# --- what-if -------------------------------------------------------------------------------------


def _whatif_layout(fig: go.Figure, ytitle: str) -> go.Figure:
    _base(fig, 360)
    fig.update_layout(margin=dict(l=70, r=70, t=30, b=60),
                      yaxis=dict(title=ytitle, tickformat=".0%", rangemode="tozero"))  # fmt: skip
    return fig


def whatif_sweep_figure(w: Whatif) -> go.Figure:
    results = w.whole().results
    x = [m.threshold_text() for m in w.methods]
    fig = go.Figure()
    for i, (key, name) in enumerate(
        ((M.TOKEN_FRACTION, "tokens"), (M.SEQUENCE_FRACTION, "sequences"))
    ):
        fig.add_trace(go.Scatter(x=x, y=[r[key] for r in results], name=name, mode="lines+markers",
                                 line=dict(color=colour(i))))  # fmt: skip
    fig.add_trace(go.Scatter(x=x, y=[r[M.ESS] for r in results], name="ESS", yaxis="y2",
                             mode="lines+markers", line=dict(dash="dot", color="#555")))  # fmt: skip
    _whatif_layout(fig, "share clipped or rejected")
    fig.update_layout(xaxis=dict(title=f"{esc(w.methods[0].name)} threshold", type="category"),
                      yaxis2=dict(title="ESS", overlaying="y", side="right", range=[0, 1.05]))  # fmt: skip
    return fig


def whatif_methods_figure(w: Whatif) -> go.Figure:
    results = w.whole().results
    x = [method_label(m) for m in w.methods]
    fig = go.Figure()
    for i, (key, name) in enumerate(
        ((M.TOKEN_FRACTION, "tokens"), (M.SEQUENCE_FRACTION, "sequences"))
    ):
        fig.add_trace(go.Bar(x=x, y=[r[key] for r in results], name=name, marker_color=colour(i)))
    _whatif_layout(fig, "share clipped or rejected")
    fig.update_layout(barmode="group", xaxis=dict(type="category"))
    return fig


def whatif_steps_figure(w: Whatif) -> go.Figure:
    per_run = steps_by_run(w)
    fig = go.Figure()
    colours = palette(len(per_run) * len(w.methods))
    n = 0
    for run, items in per_run.items():
        steps = [step for step, _ in items]
        mine = [g for _, g in items]
        prefix = f"{esc(run)} · " if len(per_run) > 1 else ""
        for j, m in enumerate(w.methods):
            y = [unit_fraction(m, g.results[j]) for g in mine]
            fig.add_trace(go.Scatter(x=steps, y=y, name=prefix + method_label(m), mode=line_mode(len(steps)),
                                     line=dict(color=colours[n])))  # fmt: skip
            n += 1
        kl = [w.batch_vllm_kl.get((run, s)) for s in steps]
        fig.add_trace(go.Scatter(x=steps, y=[k if k and k > 0 else None for k in kl],
                                 name=prefix + M.VLLM_KL, yaxis="y2", mode="lines",
                                 line=dict(color="#999", dash="dot")))  # fmt: skip
    _whatif_layout(fig, "share of units clipped or rejected")
    fig.update_layout(xaxis=dict(title="step"),
                      yaxis2=dict(title=M.VLLM_KL, overlaying="y", side="right", type="log"))  # fmt: skip
    return fig


def explain_rates_figure(p: FD.RatePlot) -> go.Figure:
    """Mean K3 per value of a finding's dimension, target and baseline; the finding's values
    drawn solid, the others faint."""
    fig = go.Figure()
    named = set(p.highlighted)
    sides = [("target", p.target)] + ([("baseline", p.baseline)] if p.baseline is not None else [])
    for i, (name, values) in enumerate(sides):
        fig.add_trace(go.Bar(
            x=[esc(lab) for lab in p.labels], y=[_positive(v) for v in values], name=name,
            marker_color=colour(i), marker_opacity=[1.0 if lab in named else 0.45 for lab in p.labels],
            text=[f"{number(v)} ({number(n)} target tokens)" for v, n in zip(values, p.tokens, strict=True)],
            hovertemplate="%{x}<br>vllm_kl %{text}<extra>" + name + "</extra>", textposition="none",
        ))  # fmt: skip
    fig.update_layout(barmode="group")
    fig.update_xaxes(title=esc(p.dim), type="category")
    fig.update_yaxes(title="vllm_kl (log scale)", type="log", exponentformat="power")
    return _base(fig, 380)


def routing_first_flip_figure(p: FirstFlipPlot) -> go.Figure:
    """Per run, the share of its differing positions whose lowest differing layer is each MoE
    layer (bars grouped by layer); the hover gives the count."""
    fig = go.Figure()
    colours = palette(len(p.runs))
    for i, run in enumerate(p.runs):
        fig.add_trace(go.Bar(
            x=p.layers[i], y=p.shares[i], name=esc(run), marker_color=colours[i],
            text=[f"{percent(v)} ({number(n)} positions)" for v, n in zip(p.shares[i], p.counts[i], strict=True)],
            hovertemplate="layer %{x}<br>%{text}<extra>" + esc(run) + "</extra>", textposition="none",
        ))  # fmt: skip
    fig.update_layout(barmode="group", showlegend=len(p.runs) > 1)
    fig.update_xaxes(
        title="first differing MoE layer", dtick=1 if max(map(len, p.layers)) <= 32 else None
    )
    fig.update_yaxes(title="share of differing positions", tickformat=".0%", rangemode="tozero")
    return _base(fig, 360)


def bisect_k3_figure(p: BisectPlot) -> go.Figure:
    """Per group (overall, each hot cell, the control), a bar per setting: its K3 against the
    rollout side with the 95% interval; the closest setting of each group drawn solid."""
    fig = go.Figure()
    colours = palette(len(p.groups))
    for g, group in enumerate(p.groups):
        k3, lo, hi = p.k3[g], p.lo[g], p.hi[g]
        fig.add_trace(go.Bar(
            x=[esc(s) for s in p.settings], y=[_positive(v) for v in k3], name=esc(group),
            marker_color=colours[g],
            marker_opacity=[1.0 if s == p.best[g] else 0.55 for s in p.settings],
            error_y=dict(type="data", symmetric=False,
                         array=[_gap(h, v) for h, v in zip(hi, k3, strict=True)],
                         arrayminus=[_gap(v, lo_) for v, lo_ in zip(k3, lo, strict=True)]),
            text=[f"K3 {number(v)} [{number(a)}, {number(b)}]" for v, a, b in zip(k3, lo, hi, strict=True)],
            hovertemplate="%{x}<br>%{text}<extra>" + esc(group) + "</extra>", textposition="none",
        ))  # fmt: skip
    fig.update_layout(barmode="group", showlegend=len(p.groups) > 1)
    fig.update_xaxes(title="setting", type="category")
    fig.update_yaxes(title="K3 vs rollout (log scale)", type="log", exponentformat="power")
    return _base(fig, 400)


def _gap(a: float | None, b: float | None) -> float | None:
    """An error bar's length (None: not drawn)."""
    if a is None or b is None or not math.isfinite(a - b):
        return None
    return max(0.0, a - b)


BUILDERS: dict[str, Callable[[Any], go.Figure]] = {
    "bisect_k3": bisect_k3_figure,
    "routing_first_flip": routing_first_flip_figure,
    "explain_rates": explain_rates_figure,
    "mismatch": mismatch_figure,
    "probs": probs_figure,
    "log_ppl": log_ppl_figure,
    "steps": steps_figure,
    "curves_overlay": overlay_figure,
    "curves_lags": lead_lag_figure,
    "compare_curve": compare_curve_figure,
    "compare_steps": compare_steps_figure,
    "compare_bins": compare_bins_figure,
    "whatif_sweep": whatif_sweep_figure,
    "whatif_methods": whatif_methods_figure,
    "whatif_steps": whatif_steps_figure,
}
