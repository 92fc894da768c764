"""The terminal writer: a result's sections as rich renderables.

Tables never elide a number (``fit`` splits a table too wide for the terminal by columns);
every data string goes through ``text.cell_text`` (control characters made visible). Figures are
for the HTML page only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from rich.console import Group as RGroup
from rich.console import RenderableType
from rich.table import Table as RTable
from rich.text import Text

from mismatchctl.analysis import sections as sec
from mismatchctl.display import visible
from mismatchctl.render.cell_text import (
    BAND_STYLE,
    HEAT_MARK_STYLE,
    HEAT_STYLE,
    VERDICT_STYLE,
    cell_text,
)
from mismatchctl.render.fit import fit

MAX_STEP_ROWS = 30  # beyond this, a sparkline and the worst steps
WORST_STEPS = 10
SPARK = "▁▂▃▄▅▆▇█"
TEXT_WIDTH = 64  # a column of sentences wraps at this width
TONE = {"bold": "bold", "note": "yellow", "warn": "yellow", "dim": "dim", "": ""}


def render(sections: Iterable[sec.Section]) -> RenderableType:
    """Every section the terminal shows, a blank line after each."""
    parts = [r for s in sections if (r := section(s)) is not None]
    return RGroup(*[RGroup(p, Text("")) for p in parts])


def section(s: sec.Section) -> RenderableType | None:
    if isinstance(s, sec.Figure):
        return None
    for kind, write in WRITERS:
        if isinstance(s, kind):
            return write(s)
    raise TypeError(f"no terminal writer for {type(s).__name__}")


def heat(h: sec.Heat) -> RenderableType:
    """The tokens as running text on their level's background, gaps on lines of their own."""
    body = Text()
    for item in h.items:
        if isinstance(item, sec.HeatGap):
            body.append(f"\n⟦{visible(item.label)}⟧\n", style="bold cyan")
            if item.text is not None:  # the tool response's own tokens, marked
                body.append(visible(item.text), style="italic cyan")
                body.append("\n")
        else:
            style = HEAT_STYLE[min(item.level, len(HEAT_STYLE) - 1)]
            body.append(
                visible(item.text), style=f"{style} {HEAT_MARK_STYLE}" if item.mark else style
            )
    legend = Text("|r|: ")
    for level, label in enumerate(h.legend):
        legend.append(f" {label} ", style=HEAT_STYLE[min(level, len(HEAT_STYLE) - 1)])
        legend.append(" ")
    if h.mark:
        legend.append(" ")
        legend.append(visible(h.mark), style=HEAT_MARK_STYLE)
    parts: list[RenderableType] = [Text(visible(h.title), style="bold"), legend, body]
    if h.how:
        parts.append(Text(visible(h.how), style="dim"))
    return RGroup(*parts)


def block(b: sec.Block) -> RenderableType | None:
    if b.media == "html":
        return None
    inner = [r for s in b.sections if (r := section(s)) is not None]
    if not inner:
        return None
    head = [] if b.bare else [Text(visible(b.title), style="bold underline")]
    return RGroup(*head, *_spaced(inner))


def _spaced(parts: list[RenderableType]) -> list[RenderableType]:
    out: list[RenderableType] = []
    for i, p in enumerate(parts):
        out.append(p)
        if i < len(parts) - 1:
            out.append(Text(""))
    return out


def cell(value: object, column: sec.Column, row: dict) -> Text:
    text = cell_text(value, column.kind_in(row))
    style = ""
    if column.band_key is not None:
        style = BAND_STYLE.get(row.get(column.band_key) or "", "")
    if column.kind == sec.Kind.VERDICT:
        style = VERDICT_STYLE.get(str(value), "")
    if column.hot_key is not None and row.get(column.hot_key):
        style = "bold red"
    return Text(text, style=style)


def table(t: sec.Table) -> RenderableType:
    rt = RTable(title=visible(t.title) if t.title else None, title_justify="left")
    for c in t.columns:
        left = not c.numeric
        wrap = c.kind == sec.Kind.TEXT  # sentences wrap; labels and numbers never do
        rt.add_column(visible(c.header), justify="left" if left else "right",
                      no_wrap=not wrap, overflow="fold", max_width=TEXT_WIDTH if wrap else None)  # fmt: skip
    for row in t.rows:
        cells = [cell(row.get(c.key), c, row) for c in t.columns]
        if t.bold_key and row.get(t.bold_key):
            cells[0].stylize("bold")
        rt.add_row(*cells)
    if t.note:
        return RGroup(fit(rt, t.keys), Text(visible(t.note), style="dim"))
    return fit(rt, t.keys)


def facts(f: sec.Facts) -> RenderableType:
    title = Text(visible(f.title), style="bold underline") if f.title else Text("")
    if not f.facts:
        return title
    if len(f.facts) == 1 and f.facts[0].kind == sec.Kind.VERDICT:
        x = f.facts[0]  # the verdict line of a diagnosis
        verdict = Text(
            cell_text(x.value, sec.Kind.VERDICT), style=VERDICT_STYLE.get(str(x.value), "")
        )
        return Text.assemble(title, "   ", verdict, f"  {visible(x.remark or '')}")
    grid = RTable.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")  # tags and notes wrap, never elided
    for x in f.facts:
        value = Text(cell_text(x.value, x.kind), style=BAND_STYLE.get(x.band or "", ""))
        if x.band is not None:
            value.append("  (")
            value.append(x.band or "-", style=BAND_STYLE.get(x.band or "", ""))
            value.append(")")
        if x.remark:
            value.append(f"  {visible(x.remark)}", style="yellow")
        grid.add_row(visible(x.label), value)
    return RGroup(title, grid) if f.title else grid


def lines(ls: sec.Lines) -> RenderableType:
    out: list[RenderableType] = []
    if ls.title:
        out.append(Text(visible(ls.title), style="bold"))
    out += [Text(visible(x.text), style=TONE.get(x.tone, "")) for x in ls.lines]
    return RGroup(*out)


def step_series(s: sec.StepSeries) -> RenderableType:
    if len(s.table.rows) <= MAX_STEP_ROWS or s.every:
        return table(s.table)
    rows = s.table.rows
    values = [rows[i].get(s.value_key) for i in range(len(rows))]
    logs = [math.log10(v) if v and v > 0 and math.isfinite(v) else None for v in values]
    finite = [v for v in logs if v is not None]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    spark = Text()
    for row, v in zip(rows, logs, strict=True):
        i = 0 if v is None or hi == lo else round((v - lo) / (hi - lo) * (len(SPARK) - 1))
        spark.append(SPARK[i], style=BAND_STYLE.get(row.get("band") or "", ""))
    first, last = rows[0].get("step"), rows[-1].get("step")
    head = Text(
        f"{visible(s.title)} ({len(rows)} steps {first}..{last}, log {s.value_key}; full series "
        "in --json / --html)",
        style="bold",
    )
    worst = sorted(s.worst[:WORST_STEPS])
    top = sec.Table(s.id, f"Worst {len(worst)} steps: {s.title.removeprefix('Per step: ')}",
                s.table.columns, [rows[i] for i in worst], s.table.keys)  # fmt: skip
    return RGroup(head, spark, table(top))


def checks(c: sec.Checks) -> RenderableType:
    if c.brief:
        out = []
        for x in c.checks:
            line = Text.assemble(
                (cell_text(x.verdict, sec.Kind.VERDICT), VERDICT_STYLE.get(x.verdict, "")),
                f" {x.name} ({x.layer}): {visible(x.finding)}",
            )
            if x.next:
                line.append(f" → {visible(x.next)}", style="italic")
            out.append(line)
        return RGroup(*out)
    rt = RTable(title=visible(c.title), title_justify="left", expand=True)
    rt.add_column("verdict", no_wrap=True)
    # a narrow terminal wraps the text onto more lines (a long word is folded, never elided)
    rt.add_column("check", ratio=1, overflow="fold")
    rt.add_column("finding and next step", ratio=3, overflow="fold")
    for x in c.checks:
        text = Text(visible(x.finding))
        if x.next:
            text.append("\n→ " + visible(x.next), style="italic")
        verdict = Text(
            cell_text(x.verdict, sec.Kind.VERDICT), style=VERDICT_STYLE.get(x.verdict, "")
        )
        rt.add_row(verdict, Text(visible(x.title)), text)
    return rt


# each kind of section and its writer, in the order ``section`` tries them
WRITERS: tuple[tuple[type, Callable[[Any], RenderableType | None]], ...] = (
    (sec.Block, block),
    (sec.Table, table),
    (sec.Facts, facts),
    (sec.Lines, lines),
    (sec.StepSeries, step_series),
    (sec.Checks, checks),
    (sec.Heat, heat),
)
