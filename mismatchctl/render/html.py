"""The HTML writer: a result's sections as one self-contained page (no network access needed;
plotly.js inlined once, and only in a page that has a figure).

The page: the title, the summary (a result's first table when it is a summary), a sticky table
of contents (with a run selector when the page holds several runs' blocks), then every section.
Blocks are ``<section>``s, folded (``<details>``) when collapsed. Every data string goes through
``html.escape`` after ``display.visible``. A figure travels as its plotly JSON, deflated and in
base64, in a ``<script type="text/plain" data-figure=...>`` block (no data can close the block:
base64 holds no ``<``): the demo report's 53 figures are 20 MB of JSON, 1.2 MB packed. The page
unpacks and draws a figure when it comes into view (a folded block's figures when it is opened),
in a placeholder of the figure's height. A figure that fails to draw says so in its place, and
any script error is recorded on ``<html data-js-errors=...>`` (the browser tests look for both).
"""

from __future__ import annotations

import base64
import html
import json
import zlib
from collections.abc import Sequence
from pathlib import Path

from mismatchctl.analysis import sections as sec
from mismatchctl.display import visible
from mismatchctl.render.cell_text import HEAT_COLOURS, cell_text
from mismatchctl.render.json import dumps
from mismatchctl.render.output import write_text
from mismatchctl.render.style import CSS, FIGURES, HEAT_CSS, INFLATE, LOADER, ONERROR
from mismatchctl.version import __version__

MAX_STEP_ROWS = 200  # beyond this, a run's step table shows its worst steps only
WORST_STEPS = 20
TONE = {"bold": "bold-line", "note": "note", "warn": "warn-line", "dim": "dim", "": ""}


def esc(value: object) -> str:
    return html.escape(visible(value), quote=True)


def page(title: str, subtitle: str, sections: Sequence[sec.Section]) -> str:
    """The whole page around the sections."""
    sections = [s for s in sections if not (isinstance(s, sec.Block) and s.media == "terminal")]
    lead: list[sec.Section] = []
    if sections and isinstance(sections[0], sec.Table) and sections[0].id == "summary":
        lead, sections = [sections[0]], list(sections[1:])
    body = "".join(section(s, 0) for s in lead) + toc(sections)
    body += "".join(section(s, 0) for s in sections)
    drawn = FIGURE_MARK in body
    plotly = f"<script>{plotly_js()}</script>" if drawn else ""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}{HEAT_CSS}</style>"
        f"<script>{ONERROR}</script>{plotly}</head><body>"
        f"<header><h1>{esc(title)}</h1><p class='sub'>{esc(subtitle)}</p></header>"
        f"<main>{body}</main>"
        f"<footer>mismatchctl {esc(__version__)}. Metric definitions: docs/metrics.md."
        f"</footer><script>{INFLATE + FIGURES if drawn else ''}{LOADER}</script></body></html>"
    )


def plotly_js() -> str:
    """plotly.js, for a page whose body holds a figure's block (data strings are escaped: the
    marker cannot come from data). A page without a figure carries none, and writing it does
    not import plotly."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def write(path: str | Path, title: str, subtitle: str, sections: Sequence[sec.Section]) -> None:
    """The page into ``path``, whole or not at all (``render.output``)."""
    write_text(path, page(title, subtitle, sections), "--html")


def toc(sections: Sequence[sec.Section]) -> str:
    links = [
        f'<a href="#{esc(s.id)}">{esc(s.title)}</a>'
        for s in sections
        if getattr(s, "title", None) and not (isinstance(s, sec.Block) and s.bare)
    ]
    runs = [s for s in sections if isinstance(s, sec.Block) and s.id.startswith("run-")]
    pick = ""
    if len(runs) > 1:
        options = "".join(f'<option value="{esc(b.id)}">{esc(b.title)}</option>' for b in runs)
        pick = (
            '<label>Run: <select id="run-select"><option value="">all runs</option>'
            f"{options}</select></label>"
        )
    if not links and not pick:
        return ""
    return f'<nav class="toc">{pick}{"".join(links)}</nav>'


def section(s: sec.Section, depth: int) -> str:
    if isinstance(s, sec.Block):
        return block(s, depth)
    if isinstance(s, sec.Table):
        return _titled(s.title, depth, table(s), s.id)
    if isinstance(s, sec.Facts):
        return facts(s, depth)
    if isinstance(s, sec.Lines):
        return lines(s, depth)
    if isinstance(s, sec.StepSeries):
        return step_series(s, depth)
    if isinstance(s, sec.Checks):
        return checks(s, depth)
    if isinstance(s, sec.Figure):
        return figure(s, depth)
    if isinstance(s, sec.Heat):
        return _titled(s.title, depth, heat(s), s.id)
    raise TypeError(f"no HTML writer for {type(s).__name__}")


MASKED_TIP = "the tool response's tokens (masked: not scored)"


def heat(h: sec.Heat) -> str:
    """Spans coloured by level with a tooltip each; gaps as marked blocks; the legend first."""
    top = len(HEAT_COLOURS) - 1
    legend = "".join(
        f'<span class="heat-{min(k, top)}">{esc(label)}</span> ' for k, label in enumerate(h.legend)
    )
    if h.mark:
        legend += f'<span class="heat-mark">{esc(h.mark)}</span> '
    out = []
    for item in h.items:
        if isinstance(item, sec.HeatGap):
            out.append(f'<span class="heat-gap">{esc(item.label)}</span>')
            if item.text is not None:
                out.append(
                    f'<span class="heat-masked" title="{MASKED_TIP}">{esc(item.text)}</span>'
                )
        else:
            mark = " heat-mark" if item.mark else ""
            out.append(
                f'<span class="heat-{min(item.level, top)}{mark}" title="{esc(item.tip)}">'
                f"{esc(item.text)}</span>"
            )
    how = f'<p class="how">{esc(h.how)}</p>' if h.how else ""
    return f'<p class="heat-legend">|r|: {legend}</p><div class="heat">{"".join(out)}</div>{how}'


def _heading(title: str, depth: int) -> str:
    tag = "h2" if depth == 0 else "h3"
    return f"<{tag}>{esc(title)}</{tag}>" if title else ""


def _titled(title: str, depth: int, body: str, anchor: str) -> str:
    """A top-level section gets its own ``<section>`` (the contents link to it)."""
    if depth == 0:
        return f'<section id="{esc(anchor)}">{_heading(title, 0)}{body}</section>'
    return f'<div id="{esc(anchor)}">{_heading(title, depth)}{body}</div>'


def block(b: sec.Block, depth: int) -> str:
    if b.media == "terminal":
        return ""
    inner = "".join(section(s, depth + 1) for s in b.sections)
    if b.bare:
        return f'<div id="{esc(b.id)}">{inner}</div>'
    cls = "block run-block" if b.id.startswith("run-") else "block"
    if b.collapsed:
        summary = f'<span class="sum">{esc(b.summary)}</span>' if b.summary else ""
        tag = "h2" if depth == 0 else "h3"
        return (
            f'<details id="{esc(b.id)}" class="{cls}"><summary><{tag}>{esc(b.title)}</{tag}>'
            f"{summary}</summary>{inner}</details>"
        )
    return f'<section id="{esc(b.id)}" class="{cls}">{_heading(b.title, depth)}{inner}</section>'


def _cell(value: object, column: sec.Column, row: dict) -> str:
    text = esc(cell_text(value, column.kind_in(row)))
    classes = []
    if column.band_key is not None and row.get(column.band_key):
        classes.append(f"band-{esc(row[column.band_key])}")
    if column.kind == sec.Kind.BAND and value:
        classes.append("band")
    if column.hot_key is not None and row.get(column.hot_key):
        classes.append("hot")
    if column.kind == sec.Kind.VERDICT:
        text = _verdict(str(value))
    if column.link_key is not None and row.get(column.link_key):
        text = f'<a href="#{esc(row[column.link_key])}">{text}</a>'
    align = "n" if column.numeric else ("t" if column.kind == sec.Kind.TEXT else "l")
    tip = f' title="{text}"' if column.kind == sec.Kind.TEXT and text else ""
    return f'<td class="{" ".join([align, *classes])}"{tip}>{text}</td>'


def _verdict(verdict: str) -> str:
    cls = "na" if verdict == "n/a" else verdict
    return f'<span class="verdict verdict-{esc(cls)}">{esc(verdict)}</span>'


def table(t: sec.Table, rows: list[dict] | None = None) -> str:
    head = "".join(
        f'<th class="{"n" if c.numeric else ("t" if c.kind == sec.Kind.TEXT else "l")}"'
        + (f' title="{esc(c.metric.description)}"' if c.metric is not None else "")
        + f">{esc(c.header)}</th>"
        for c in t.columns
    )
    body = "".join(
        f"<tr{' class=bold' if t.bold_key and row.get(t.bold_key) else ''}>"
        + "".join(_cell(row.get(c.key), c, row) for c in t.columns)
        + "</tr>"
        for row in (t.rows if rows is None else rows)
    )
    note = f'<p class="note">{esc(t.note)}</p>' if t.note else ""
    return (
        f'<div class="table-wrap"><table class="tbl-{esc(t.id)}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>{note}"
    )


def facts(f: sec.Facts, depth: int) -> str:
    if not f.facts:
        return _titled(f.title, depth, "", f.id)
    if len(f.facts) == 1 and f.facts[0].kind == sec.Kind.VERDICT:
        x = f.facts[0]
        body = f"<p>{_verdict(str(x.value))} {esc(x.remark or '')}</p>"
        return _titled(f.title, depth, body, f.id)
    rows = []
    for x in f.facts:
        value = esc(cell_text(x.value, x.kind))
        if x.band is not None:
            value = f'<span class="band-{esc(x.band)}">{value}  ({esc(x.band)})</span>'
        if x.remark:
            value += f' <span class="warn-line">{esc(x.remark)}</span>'
        rows.append(f"<tr><td>{esc(x.label)}</td><td>{value}</td></tr>")
    body = f'<table class="facts"><tbody>{"".join(rows)}</tbody></table>'
    return _titled(f.title, depth, body, f.id)


def lines(ls: sec.Lines, depth: int) -> str:
    if not ls.lines:
        return ""
    items = "".join(f'<li class="{TONE.get(x.tone, "")}">{esc(x.text)}</li>' for x in ls.lines)
    body = f'<ul class="lines">{items}</ul>'
    return (
        _titled(ls.title or "", depth, body, ls.id)
        if ls.title
        else f'<div id="{esc(ls.id)}">{body}</div>'
    )


def step_series(s: sec.StepSeries, depth: int) -> str:
    rows = s.table.rows
    if len(rows) <= MAX_STEP_ROWS or s.every:
        return _titled(s.title, depth, table(s.table), s.id)
    worst = sorted(s.worst[:WORST_STEPS])
    note = (
        f'<p class="note">{len(rows):,} steps: the {len(worst)} with the largest '
        f"{esc(s.value_key)}, in step order; every step is in the per-step figure and in --json.</p>"
    )
    return _titled(s.title, depth, note + table(s.table, [rows[i] for i in worst]), s.id)


def checks(c: sec.Checks, depth: int) -> str:
    rows = []
    for x in c.checks:
        nxt = f'<div class="next">→ {esc(x.next)}</div>' if x.next else ""
        evidence = (
            f"<details><summary>evidence</summary><pre>{esc(dumps(x.evidence))}</pre></details>"
            if x.evidence
            else ""
        )
        rows.append(
            f'<tr id="{esc(x.anchor)}"><td class="l">{_verdict(x.verdict)}</td>'
            f'<td class="t">{esc(x.title)}</td><td class="t">{esc(x.finding)}{nxt}{evidence}</td></tr>'
        )
    body = (
        '<div class="table-wrap checks"><table><thead><tr><th class="l">verdict</th>'
        '<th class="t">check</th><th class="t">finding and next step</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )
    return _titled(c.title, depth, body, c.id)


FIGURE_MARK = '<script type="text/plain" data-encoding="json;deflate;base64" data-figure="'
DEFLATE_LEVEL = 6  # level 9 packs the demo's figures 5% smaller in 7 times the time


def figure(f: sec.Figure, depth: int) -> str:
    """A figure's placeholder (its height), its packed JSON and its 'how to read' line."""
    import plotly.io as pio

    from mismatchctl.render import figures

    fig = figures.build(f)
    data = pack(pio.to_json(fig, validate=False, engine="json"))
    div = f"{f.id}-plot"
    how = f'<p class="how">{esc(f.how)}</p>' if f.how else ""
    height = f' style="min-height:{int(fig.layout.height)}px"' if fig.layout.height else ""
    body = (
        f'<figure id="{esc(f.id)}">{_heading(f.title, max(depth, 1))}{how}'
        f'<div class="figure" id="{esc(div)}"{height}></div>'
        f'{FIGURE_MARK}{esc(div)}">{data}</script></figure>'
    )
    return f'<section id="{esc(f.id)}-s">{body}</section>' if depth == 0 else body


def pack(text: str) -> str:
    """A figure's JSON as the page carries it: raw deflate (no header, no timestamp: the same
    figure, the same bytes; the page's script inflates it), then base64. The heatmaps' empty
    cells make most of the JSON, and pack to almost nothing."""
    packer = zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    packed = packer.compress(text.encode("utf-8")) + packer.flush()
    return base64.b64encode(packed).decode("ascii")


def unpack(data: str) -> dict:
    return json.loads(zlib.decompress(base64.b64decode(data), -zlib.MAX_WBITS).decode("utf-8"))


def packed_figures(text: str) -> list[str]:
    """The figures of a page as it carries them (deflated, base64)."""
    return [
        chunk.split('">', 1)[1].split("</script>", 1)[0] for chunk in text.split(FIGURE_MARK)[1:]
    ]


def page_json_blocks(text: str) -> list[dict]:
    """The figures embedded in a page, unpacked (for tests and tooling)."""
    return [unpack(data) for data in packed_figures(text)]
