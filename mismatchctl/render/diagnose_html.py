"""The diagnosis as HTML: a "Diagnosis" fragment for the HTML report (one table per layer,
coloured verdicts, the evidence of each check folded under it) and a standalone page around it.
Every string goes through ``html.escape``; the evidence is shown as indented JSON."""

from __future__ import annotations

import html
from pathlib import Path

from mismatchctl.analysis.diagnose import Diagnosis, layers
from mismatchctl.analysis.diagnose_base import Check
from mismatchctl.render.jsonout import dumps
from mismatchctl.render.standalone_html import standalone_page

# Scoped to the fragment so that it looks the same inside the report and in its own page.
STYLE = """
.diagnosis .verdict { font-weight:700; text-transform:uppercase; white-space:nowrap; }
.diagnosis .verdict-ok { color:#1a7f37; }
.diagnosis .verdict-warn { color:#9a6700; }
.diagnosis .verdict-fail { color:#cf222e; }
.diagnosis .verdict-na { color:#59636e; font-weight:400; text-transform:none; }
.diagnosis table { width:100%; max-width:1200px; table-layout:fixed; }
.diagnosis th:nth-child(1) { width:96px; }
.diagnosis th:nth-child(2) { width:300px; }
.diagnosis td { white-space:normal; vertical-align:top; }
.diagnosis .next { font-style:italic; margin-top:4px; }
.diagnosis details pre { font-size:12px; max-height:320px; overflow:auto; background:#f6f8fa;
  padding:8px; white-space:pre-wrap; word-break:break-word; }
"""


def _verdict(verdict: str) -> str:
    cls = "na" if verdict == "n/a" else verdict
    return f'<span class="verdict verdict-{cls}">{html.escape(verdict)}</span>'


def _row(c: Check) -> str:
    next_step = f'<div class="next">→ {html.escape(c.next)}</div>' if c.next else ""
    evidence = (
        f"<details><summary>evidence</summary><pre>{html.escape(dumps(c.evidence))}</pre></details>"
        if c.evidence
        else ""
    )
    return (
        f'<tr id="check-{html.escape(c.name)}"><td class="l">{_verdict(c.verdict)}</td>'
        f'<td class="l">{html.escape(c.title)}</td>'
        f'<td class="l finding">{html.escape(c.finding)}{next_step}{evidence}</td></tr>'
    )


def diagnose_html(d: Diagnosis) -> str:
    """The fragment: a section titled "Diagnosis"."""
    return (
        f'<section id="diagnosis" class="diagnosis"><h2>Diagnosis</h2>{diagnosis_body(d)}</section>'
    )


def diagnosis_body(d: Diagnosis) -> str:
    """The diagnosis without a heading (the report puts one per run under its own heading)."""
    verdicts = [c.verdict for c in d.checks]
    counts = ", ".join(f"{verdicts.count(v)} {v}" for v in ("fail", "warn", "ok", "n/a"))
    body = "".join(
        f"<h3>{html.escape(layer.capitalize())}</h3><table><thead><tr>"
        '<th class="l">verdict</th><th class="l">check</th><th class="l">finding</th>'
        f"</tr></thead><tbody>{''.join(_row(c) for c in checks)}</tbody></table>"
        for layer, checks in layers(d)
    )
    return (
        f'<div class="diagnosis"><style>{STYLE}</style>'
        f"<p>Overall: {_verdict(d.verdict)} ({html.escape(counts)}). Checks run from data "
        "integrity to the objective: fix the first layer that fails before the ones after it."
        f"</p>{body}</div>"
    )


def write_diagnose_html(d: Diagnosis, path: str | Path) -> None:
    sel = d.report.selection.label or ", ".join(d.report.selection.names)
    page = standalone_page(
        f"mismatchctl diagnosis: {sel}",
        "Every check of the training-inference mismatch, layer by layer, with its evidence.",
        diagnose_html(d),
    )
    Path(path).write_text(page, encoding="utf-8")
