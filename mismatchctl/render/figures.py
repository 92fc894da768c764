"""Plotly figures of the HTML report, drawn from ``FigureData`` and the report's groups.

Nothing here computes a metric: densities, samples and per-group numbers come from the report.
What happens here is presentation: coordinates (the axes' transforms), log colour of counts,
tick labels, and thinning of very long step series to a point budget (keeping each bucket's
worst batch, so spikes stay visible). Every user string (run, gpu, tag) is HTML-escaped because
plotly interprets a subset of HTML in trace names and hover text.
"""

from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go

from mismatchctl.analysis.figures import LOG_PPL, LOG_RATIO, P_INFER_LOG, FigureData
from mismatchctl.analysis.report import Group, Report
from mismatchctl.engines import plan as K
from mismatchctl.render.fmt import label, num
from mismatchctl.stats import BANDS, bin_label
from mismatchctl.stats import registry as M
from mismatchctl.stats.density import Axis, Density2D

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
BLUES = [[0.0, "#d6e6f4"], [0.5, "#4a90c2"], [1.0, "#08306b"]]
GREYS = [[0.0, "#ececec"], [1.0, "#4d4d4d"]]
KIND_COLOURS = {"first": "#1f77b4", "later": "#ff7f0e"}
KIND_NAMES = {"first": "first turn", "later": "later turns"}
BAND_FILL = {
    "low": "rgba(46,160,67,0.10)",
    "medium": "rgba(230,190,0,0.14)",
    "high": "rgba(255,127,14,0.14)",
    "severe": "rgba(214,39,40,0.14)",
}
MEAN_COLOUR = "#d62728"
STEP_POINT_BUDGET = 100_000  # per figure, over all its series: bounds the page size
MIN_POINTS_PER_SERIES = 500


def esc(value: object) -> str:
    return html.escape(label(value))


def _base(fig: go.Figure, height: int) -> go.Figure:
    fig.update_layout(
        template="plotly_white",
        height=height,
        margin=dict(l=70, r=30, t=30, b=60),
        font=dict(family=FONT, size=13),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0.0),
        hoverlabel=dict(font=dict(family=FONT)),
    )
    return fig


def _log_ticks(axis: Axis) -> dict:
    """Decade ticks of a log10 axis, labelled in raw values."""
    decades = range(math.ceil(axis.lo), math.floor(axis.hi) + 1)
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
    centres_x = (d.x.edges[:-1] + d.x.edges[1:]) / 2
    centres_y = (d.y.edges[:-1] + d.y.edges[1:]) / 2
    return go.Heatmap(
        x=centres_x,
        y=centres_y,
        z=z,
        zmin=0.0,
        zmax=top,
        customdata=counts.astype(np.int32),
        colorscale=colorscale,
        colorbar=dict(
            title=dict(text="count", side="right"),
            tickvals=ticks,
            ticktext=[f"{10**t:,}" for t in ticks],
            thickness=12,
        ),
        hovertemplate=hover + "<br>%{customdata:,} " + name + "<extra></extra>",
        name=name,
        showlegend=False,
    )


def _occupied(d: Density2D, axis: int, pad: int = 3) -> list[float]:
    """Range (transformed coordinate) of the rows or columns that hold counts, padded a little."""
    a = d.x if axis == 0 else d.y
    filled = np.flatnonzero(d.counts.sum(axis=1 - axis))
    if len(filled) == 0:
        return [a.lo, a.hi]
    edges = a.edges
    return [float(edges[max(0, filled[0] - pad)]), float(edges[min(a.bins, filled[-1] + 1 + pad)])]


# --- (a) mismatch vs inference probability -------------------------------------------------


def mismatch_figure(fd: FigureData, report: Report) -> go.Figure:
    fig = go.Figure()
    fig.add_trace(
        _heatmap(fd.mismatch, BLUES, "p_infer ≈ 10^%{x:.2f}", "tokens"),
    )
    for trace in _bin_traces(report):
        fig.add_trace(trace)
    y_range = _occupied(fd.mismatch, 1)
    fig.add_hline(y=0, line=dict(color="#888", width=1))
    fig.update_xaxes(
        title="inference probability p_infer (log scale)",
        range=[P_INFER_LOG.lo, P_INFER_LOG.hi + 0.15],
        **_log_ticks(P_INFER_LOG),
    )
    fig.update_yaxes(
        title="r = trainer − rollout logprob (symlog)",
        range=[min(y_range[0], -LOG_RATIO.forward(1e-3)), max(y_range[1], LOG_RATIO.forward(1e-3))],
        zeroline=False,
        **_asinh_ticks(LOG_RATIO),
    )
    return _base(fig, 560)


def _bin_traces(report: Report) -> list[go.Scatter]:
    """Per probability bin of the report: a p01–p99 box and the mean of r across the bin."""
    edges = report.bin_edges
    box_x: list[float | None] = []
    box_y: list[float | None] = []
    mean_x: list[float | None] = []
    mean_y: list[float | None] = []
    hx, hy, htext = [], [], []
    for g in report.split(K.BIN):
        m, k = g.metrics, int(g.by[K.BIN])
        x0, x1 = (
            float(np.clip(P_INFER_LOG.forward(e), P_INFER_LOG.lo, 0.0)) for e in edges[k : k + 2]
        )
        if None in (m.get(M.LOG_RATIO_MEAN), m.get(M.LOG_RATIO_P01), m.get(M.LOG_RATIO_P99)):
            continue
        lo, hi, mean = (
            float(LOG_RATIO.forward(m[n]))
            for n in (M.LOG_RATIO_P01, M.LOG_RATIO_P99, M.LOG_RATIO_MEAN)
        )
        box_x += [x0, x1, x1, x0, x0, None]
        box_y += [lo, lo, hi, hi, lo, None]
        mean_x += [x0, x1, None]
        mean_y += [mean, mean, None]
        hx.append((x0 + x1) / 2)
        hy.append(mean)
        htext.append(_bin_hover(report, g))
    return [
        go.Scatter(
            x=box_x,
            y=box_y,
            fill="toself",
            fillcolor="rgba(214,39,40,0.12)",
            mode="lines",
            line=dict(color="rgba(214,39,40,0.55)", width=1, dash="dot"),
            name="p01–p99 of r per bin",
            hoverinfo="skip",
        ),
        go.Scatter(
            x=mean_x,
            y=mean_y,
            mode="lines",
            line=dict(color=MEAN_COLOUR, width=2.5),
            name="mean r per bin",
            hoverinfo="skip",
        ),
        go.Scatter(
            x=hx,
            y=hy,
            mode="markers",
            marker=dict(color=MEAN_COLOUR, size=7),
            text=htext,
            hovertemplate="%{text}<extra></extra>",
            showlegend=False,
        ),
    ]


def _bin_hover(report: Report, g: Group) -> str:
    m = g.metrics
    rows = [
        f"<b>p_infer in {bin_label(report.bin_edges, int(g.by[K.BIN]))}</b>",
        f"tokens {num(m['tokens'])} ({_pct(m.get(M.TOKEN_SHARE))})",
        f"vllm_kl {num(m[M.VLLM_KL])} (kl share {_pct(m.get(M.KL_SHARE))})",
        f"mean r {num(m[M.LOG_RATIO_MEAN])}",
        f"p01 / p50 / p99 r {num(m.get(M.LOG_RATIO_P01))} / {num(m.get(M.LOG_RATIO_P50))} / {num(m.get(M.LOG_RATIO_P99))}",
    ]
    return "<br>".join(rows)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


# --- (b) token probabilities -----------------------------------------------------------------


def probs_figure(fd: FigureData, report: Report) -> go.Figure:
    fig = go.Figure(_heatmap(fd.probs, BLUES, "p_infer %{x:.3f}<br>p_train %{y:.3f}", "tokens"))
    whole = report.whole()
    pearson = whole.metrics.get(M.PROB_PEARSON) if whole else None
    fig.add_trace(
        go.Scatter(
            x=[0, 1],
            y=[0, 1],
            mode="lines",
            line=dict(color="#555", dash="dash", width=1),
            name=f"p_train = p_infer  (Pearson r = {num(pearson, 6)})",
            hoverinfo="skip",
        )
    )
    fig.update_xaxes(title="inference probability p_infer", range=[0, 1], constrain="domain")
    fig.update_yaxes(title="trainer probability p_train", range=[0, 1], scaleanchor="x")
    return _base(fig, 620)


# --- (c) log-ppl of segments ---------------------------------------------------------------


def log_ppl_figure(fd: FigureData, report: Report) -> go.Figure:
    fig = go.Figure(
        _heatmap(
            fd.log_ppl,
            GREYS,
            "rollout log-ppl ≈ 10^%{x:.2f}<br>trainer log-ppl ≈ 10^%{y:.2f}",
            "segments",
        )
    )
    kinds = {g.by[K.TURN_KIND]: g.metrics for g in report.split(K.TURN_KIND)}
    for kind in fd.kind_labels:
        fig.add_trace(_sample_trace(fd, kind, kinds.get(kind, {})))
    fig.add_trace(
        go.Scatter(
            x=[LOG_PPL.lo, LOG_PPL.hi],
            y=[LOG_PPL.lo, LOG_PPL.hi],
            mode="lines",
            line=dict(color="#555", dash="dash", width=1),
            name="trainer = rollout",
            hoverinfo="skip",
        )
    )
    lo, hi = _occupied(fd.log_ppl, 0), _occupied(fd.log_ppl, 1)
    both = [min(lo[0], hi[0]), max(lo[1], hi[1])]
    fig.update_xaxes(
        title="rollout log-ppl = −mean(rollout logprob) (log scale)",
        range=both,
        **_log_ticks(LOG_PPL),
    )
    fig.update_yaxes(
        title="trainer log-ppl = −mean(trainer logprob) (log scale)",
        range=both,
        scaleanchor="x",
        **_log_ticks(LOG_PPL),
    )
    return _base(fig, 640)


def _sample_trace(fd: FigureData, kind: str, metrics: dict) -> go.Scattergl:
    idx = fd.sample_kind(kind)
    s = fd.sample
    x = np.clip(LOG_PPL.forward(s.rollout_log_ppl[idx]), LOG_PPL.lo, LOG_PPL.hi)
    y = np.clip(LOG_PPL.forward(s.trainer_log_ppl[idx]), LOG_PPL.lo, LOG_PPL.hi)
    text = [
        f"run {esc(s.run[i])}, step {s.step[i]}, seq {s.seq[i]}<br>{s.tokens[i]} tokens<br>"
        f"rollout log-ppl {num(float(s.rollout_log_ppl[i]))}<br>trainer log-ppl {num(float(s.trainer_log_ppl[i]))}"
        for i in idx.tolist()
    ]
    name = (
        f"{KIND_NAMES[kind]}: Pearson r = {num(metrics.get(M.LOG_PPL_PEARSON), 6)} "
        f"({num(metrics.get('sequences'))} segments, {len(idx):,} drawn)"
    )
    return go.Scatter(
        x=x,
        y=y,
        mode="markers",
        name=name,
        text=text,
        marker=dict(color=KIND_COLOURS[kind], size=5, opacity=0.7, line=dict(width=0)),
        hovertemplate="%{text}<extra>" + KIND_NAMES[kind] + "</extra>",
    )


# --- (d) per-step vllm_kl ------------------------------------------------------------------


def steps_figure(report: Report, key: str) -> go.Figure:
    """Per-batch vllm_kl of each ``key`` value (run or gpu) on a log axis, bands shaded."""
    series: dict[object, list[Group]] = {}
    for g in report.split(key, K.STEP):
        series.setdefault(g.by[key], []).append(g)
    budget = max(MIN_POINTS_PER_SERIES, STEP_POINT_BUDGET // max(1, len(series)))
    fig = go.Figure()
    values = []
    for name, groups in series.items():
        shown = thin(groups, budget)
        ys = [_positive(g.metrics.get(M.VLLM_KL)) for g in shown]
        values += [v for v in ys if v is not None]
        fig.add_trace(
            go.Scatter(
                x=[g.by[K.STEP] for g in shown],
                y=ys,
                mode="lines+markers",
                name=f"{key} {esc(name)}",
                marker=dict(size=5),
                line=dict(width=1.5),
                text=[
                    f"{key} {esc(name)}<br>step {g.by[K.STEP]}<br>vllm_kl {num(g.metrics.get(M.VLLM_KL))} ({g.band or '-'})"
                    for g in shown
                ],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    lo = math.log10(min([*values, 1e-4])) - 0.3
    hi = math.log10(max([*values, 0.2])) + 0.3
    _band_shapes(fig, lo, hi)
    fig.update_xaxes(title="step")
    fig.update_yaxes(
        title="vllm_kl per batch (log scale)",
        type="log",
        range=[lo, hi],
        dtick=1,
        exponentformat="power",
    )
    return _base(fig, 460)


def thin(groups: list[Group], budget: int) -> list[Group]:
    """At most ``budget`` groups in step order: per equal bucket of steps, the one with the
    largest vllm_kl (missing values count as lowest), so the spikes are what remains."""
    if len(groups) <= budget:
        return groups
    keep = []
    for bucket in np.array_split(np.arange(len(groups)), budget):
        keep.append(max(bucket.tolist(), key=lambda i: _sortable(groups[i].metrics.get(M.VLLM_KL))))
    return [groups[i] for i in keep]


def _sortable(x: float | None) -> float:
    return -math.inf if x is None or math.isnan(x) else x


def _positive(x: float | None) -> float | None:
    """A log axis cannot show 0, NaN or infinity: those batches are gaps."""
    return x if x is not None and math.isfinite(x) and x > 0 else None


def _band_shapes(fig: go.Figure, lo: float, hi: float) -> None:
    lower = 10.0**lo
    for name, upper in BANDS:
        top = min(upper, 10.0**hi)
        if top <= lower:
            continue
        fig.add_hrect(y0=lower, y1=top, fillcolor=BAND_FILL[name], line_width=0, layer="below")
        fig.add_annotation(
            x=1.0,
            xref="paper",
            xanchor="right",
            y=math.log10(top),
            yref="y",
            yanchor="top",
            text=name,
            showarrow=False,
            font=dict(size=11, color="#666"),
        )
        lower = top
