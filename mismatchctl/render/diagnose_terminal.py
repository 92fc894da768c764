"""The terminal view of a diagnosis: one table per layer, coloured verdicts, what to try next."""

from __future__ import annotations

from rich.console import Group as RGroup
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from mismatchctl.analysis.diagnose import Diagnosis, layers
from mismatchctl.display import visible

VERDICT_STYLE = {"ok": "green", "warn": "bold yellow", "fail": "bold red", "n/a": "dim"}


def verdict_text(verdict: str) -> Text:
    return Text(verdict.upper() if verdict != "n/a" else verdict, style=VERDICT_STYLE[verdict])


def verdict_line(d: Diagnosis) -> Text:
    """``Diagnosis: SELECTION   FAIL  (2 fail, 1 warn, 9 ok, 6 n/a)``."""
    sel = visible(d.report.selection.label or ", ".join(d.report.selection.names))
    verdicts = [c.verdict for c in d.checks]
    counts = ", ".join(f"{verdicts.count(v)} {v}" for v in ("fail", "warn", "ok", "n/a"))
    return Text.assemble(
        (f"Diagnosis: {sel}", "bold underline"), "   ", verdict_text(d.verdict), f"  ({counts})"
    )


def render_brief(d: Diagnosis) -> RenderableType:
    """`diagnose -q`: the verdict line, then one line per check that fails or warns (failures
    first) with its finding and what to try next; nothing else."""
    lines: list[RenderableType] = [verdict_line(d)]
    for verdict in ("fail", "warn"):
        for c in d.checks:
            if c.verdict == verdict:
                line = Text.assemble(
                    verdict_text(c.verdict), f" {c.name} ({c.layer}): {visible(c.finding)}"
                )
                if c.next:
                    line.append(f" → {visible(c.next)}", style="italic")
                lines.append(line)
    return RGroup(*lines)


def render_diagnosis(d: Diagnosis) -> RenderableType:
    parts: list[RenderableType] = [verdict_line(d)]
    for layer, checks in layers(d):
        table = Table(title=layer.capitalize(), title_justify="left", expand=True)
        table.add_column("verdict", no_wrap=True)
        # a narrow terminal wraps the text onto more lines (a long word is folded, never elided)
        table.add_column("check", ratio=1, overflow="fold")
        table.add_column("finding and next step", ratio=3, overflow="fold")
        for c in checks:
            cell = Text(visible(c.finding))
            if c.next:
                cell.append("\n→ " + visible(c.next), style="italic")
            table.add_row(verdict_text(c.verdict), Text(c.title), cell)
        parts.append(table)
    parts.append(Text("Evidence of every check: --json or --html.", style="dim"))
    return RGroup(*[RGroup(p, Text("")) for p in parts])
