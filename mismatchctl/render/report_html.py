"""The HTML report: one self-contained page (plotly.js inlined once, no network access needed).

Figures travel as JSON in ``<script type="application/json">`` blocks drawn by one small loader;
``<`` is written as ``\\u003c`` inside them so that no data (a run called ``</script>``) can
close the block. A figure that fails to draw says so in its place, and any script error is
recorded on ``<html data-js-errors=...>`` (the browser tests look for both).
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from mismatchctl import __version__
from mismatchctl.analysis.diagnose import Diagnosis
from mismatchctl.analysis.report import Report
from mismatchctl.engines import plan as K
from mismatchctl.render import figures as F
from mismatchctl.render import html_tables as T
from mismatchctl.render.curves_html import curves_body
from mismatchctl.render.diagnose_html import diagnosis_body
from mismatchctl.render.report_html_style import CSS, LOADER, ONERROR


@dataclass(frozen=True)
class Section:
    anchor: str
    title: str
    body: str


def write_report_html(
    report: Report, path: str | Path, diagnoses: Sequence[Diagnosis] = ()
) -> None:
    Path(path).write_text(report_html(report, diagnoses), encoding="utf-8")


def report_html(report: Report, diagnoses: Sequence[Diagnosis] = ()) -> str:
    """The page; ``diagnoses`` (one per run, from ``diagnose``) add a "Diagnosis" section."""
    sections = [*_figure_sections(report), *_table_sections(report)]
    if diagnoses:
        body = "".join(
            f"<h3>{html.escape(d.report.selection.label or ', '.join(d.report.selection.names))}</h3>"
            + diagnosis_body(d)
            for d in diagnoses
        )
        sections.insert(0, Section("diagnosis", "Diagnosis", body))
    nav = "".join(f'<a href="#{s.anchor}">{html.escape(s.title)}</a>' for s in sections)
    body = "".join(
        f'<section id="{s.anchor}"><h2>{html.escape(s.title)}</h2>{s.body}</section>'
        for s in sections
    )
    title = _title(report)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style>"
        f"<script>{ONERROR}</script><script>{get_plotlyjs()}</script></head><body>"
        f"<header>{_header(report, title)}</header><nav>{nav}</nav><main>{body}</main>"
        f"<footer>mismatchctl {html.escape(__version__)}. Metric definitions: docs/metrics.md."
        f"</footer><script>{LOADER}</script></body></html>"
    )


def _title(report: Report) -> str:
    names = report.selection.names
    runs = f"run {names[0]}" if len(names) == 1 else f"{len(names)} runs: " + ", ".join(names)
    return f"mismatchctl report: {runs}"


def _header(report: Report, title: str) -> str:
    chips = []
    for r in report.selection.runs:
        tags = "".join(
            f'<span class="tag">{html.escape(k)}={html.escape(v)}</span>' for k, v in r.tags.items()
        )
        chips.append(f'<span class="run"><b>{html.escape(r.name)}</b>{tags}</span>')
    steps = report.selection.steps
    scope = f" · steps {html.escape(str(steps))}" if steps is not None else ""
    return (
        f"<h1>{html.escape(title)}</h1><div class='runs'>{''.join(chips)}</div>"
        f"<p class='sub'>Training–inference logprob mismatch: trainer logprobs recomputed by "
        f"the trainer vs rollout logprobs of the inference engine · aggregation "
        f"{html.escape(report.aggregation)}{scope}</p>"
    )


def figure_block(anchor: str, fig: go.Figure, how: str) -> str:
    """A figure's div, its JSON and its 'how to read' line (``how`` is trusted static text)."""
    data = pio.to_json(fig, validate=False, engine="json")
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    div = f"fig-{anchor}"
    return (
        f'<p class="how">{how}</p><div class="figure" id="{div}"></div>'
        f'<script type="application/json" data-figure="{div}">{data}</script>'
    )


HOW_MISMATCH = (
    "Each cell counts tokens by their inference probability p_infer (x, log scale; smaller "
    "than 1e-12 in the first column) and their log ratio r = trainer − rollout logprob (y, linear "
    "within ±0.001 and logarithmic beyond). Red: the mean of r in each probability bin of the "
    "report, shaded: its p01–p99 range; hover the dots for the bin's numbers. A band that widens "
    "to the left means the rare tokens carry the mismatch."
)
HOW_PROBS = (
    "Each cell counts tokens by p_infer (x) and p_train (y), 100 bins per side, colour on a "
    "log scale. Tokens on the dashed diagonal agree; mass away from it is the mismatch in "
    "probability space."
)
HOW_LOG_PPL = (
    "One point per segment (a sequence's tokens in its first turn, or in its later turns after "
    "tool responses): x its rollout log-ppl, y its trainer log-ppl, both log scale (below 1e-4 "
    "drawn at the edge). Grey: the density of all segments; points: a deterministic sample "
    "(up to 2,000 per turn kind, the same for the same data). Above the diagonal the trainer "
    "is less confident than the inference engine; the legend gives each kind's Pearson r over "
    "all its segments."
)
HOW_STEPS = (
    "vllm_kl of each batch (training step), log scale, over the severity bands: low ≤ 1e-3, "
    "medium ≤ 2e-2, high ≤ 1e-1, severe above. Batches with vllm_kl = 0 are not drawn."
)


def _figure_sections(report: Report) -> list[Section]:
    fd = report.figures
    out = []
    if fd is None:
        note = (
            '<p class="note">Figure data was not computed: build the report with '
            "figures=True (the CLI does so for --html).</p>"
        )
        out.append(Section("figures", "Figures", note))
    else:
        out += [
            Section(
                "mismatch-vs-probability",
                "Mismatch vs inference probability",
                figure_block("mismatch", F.mismatch_figure(fd, report), HOW_MISMATCH),
            ),
            Section(
                "token-probabilities",
                "Token probabilities: p_infer vs p_train",
                figure_block("probs", F.probs_figure(fd, report), HOW_PROBS),
            ),
            Section(
                "log-ppl",
                "Log-perplexity of segments: first vs later turns",
                figure_block("log-ppl", F.log_ppl_figure(fd, report), HOW_LOG_PPL),
            ),
        ]
    out.append(
        Section(
            "steps-figure",
            "vllm_kl per step, per run",
            figure_block("steps-run", F.steps_figure(report, K.RUN), HOW_STEPS),
        )
    )
    if report.curves:
        out.append(Section("curves", "Training curves", curves_body(report.curves, figure_block)))
    if report.hardware is not None:
        out.append(
            Section(
                "gpu-figure",
                "vllm_kl per step, per gpu",
                figure_block("steps-gpu", F.steps_figure(report, K.GPU), HOW_STEPS),
            )
        )
    return out


def _table_sections(report: Report) -> list[Section]:
    out = [Section("headline", "Headline", T.headline(report))]
    if len(report.selection.runs) > 1:
        out.append(Section("runs", "Runs", T.runs_table(report)))
    out += [
        Section(
            "bins",
            "By inference probability p_infer = exp(rollout logprob)",
            '<p class="how">Red kl share: a bin holding more than twice its share of tokens '
            "in KL (and over 5%).</p>" + T.bins_table(report),
        ),
        Section("turns", "First turn vs turns after a tool response", T.turns_table(report)),
    ]
    steps = "".join(
        f"<h3>{html.escape(run)}</h3>"
        + (f'<p class="note">{html.escape(note)}</p>' if note else "")
        + tab
        for run, note, tab in T.step_tables(report)
    )
    out.append(Section("steps", "Per step", steps or '<p class="note">No steps.</p>'))
    if report.hardware is not None:
        out.append(
            Section(
                "hardware",
                "By hardware (per-batch vllm_kl over each gpu's batches)",
                T.hardware_table(report),
            )
        )
    for i, (title, tab) in enumerate(T.extra_splits(report)):
        out.append(Section(f"split-{i}", title, tab))
    return out


def page_json_blocks(page: str) -> list[dict]:
    """The figures embedded in a page (for tests and tooling)."""
    out = []
    marker = '<script type="application/json" data-figure="'
    for chunk in page.split(marker)[1:]:
        body = chunk.split('">', 1)[1].split("</script>", 1)[0]
        out.append(json.loads(body))
    return out
