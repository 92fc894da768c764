"""The terminal view of a diagnosis: one table per layer, coloured verdicts, what to try next."""

from __future__ import annotations

from rich.console import Group as RGroup
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from mismatchctl.analysis.diagnose import Diagnosis, layers

VERDICT_STYLE = {"ok": "green", "warn": "bold yellow", "fail": "bold red", "n/a": "dim"}


def verdict_text(verdict: str) -> Text:
    return Text(verdict.upper() if verdict != "n/a" else verdict, style=VERDICT_STYLE[verdict])


def render_diagnosis(d: Diagnosis) -> RenderableType:
    sel = d.report.selection.label or ", ".join(d.report.selection.names)
    verdicts = [c.verdict for c in d.checks]
    counts = ", ".join(f"{verdicts.count(v)} {v}" for v in ("fail", "warn", "ok", "n/a"))
    parts: list[RenderableType] = [
        Text.assemble(
            (f"Diagnosis: {sel}", "bold underline"), "   ", verdict_text(d.verdict), f"  ({counts})"
        )
    ]
    for layer, checks in layers(d):
        table = Table(title=layer.capitalize(), title_justify="left", expand=True)
        table.add_column("verdict", no_wrap=True)
        table.add_column("check", ratio=1)
        table.add_column("finding and next step", ratio=3)
        for c in checks:
            cell = Text(c.finding)
            if c.next:
                cell.append("\n→ " + c.next, style="italic")
            table.add_row(verdict_text(c.verdict), Text(c.title), cell)
        parts.append(table)
    parts.append(Text("Evidence of every check: --json or --html.", style="dim"))
    return RGroup(*[RGroup(p, Text("")) for p in parts])
