"""The terminal view of a comparison: configuration, headline with intervals, where it differs."""

from __future__ import annotations

from typing import Any

from rich.console import Group as RGroup
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from mismatchctl.analysis.compare import Comparison
from mismatchctl.display import visible
from mismatchctl.engines import plan as K
from mismatchctl.render import curves_rows as CR
from mismatchctl.render.compare_rows import (
    Rows,
    bins_rows,
    gap_rows,
    headline_rows,
    keyed_rows,
)
from mismatchctl.render.fit import fit
from mismatchctl.render.fmt import num

MAX_STEP_ROWS = 30


def render_comparison(c: Comparison) -> RenderableType:
    a, b = visible(c.a.selection.label), visible(c.b.selection.label)
    parts: list[RenderableType] = [
        Text(f"Compare  A: {a}   B: {b}", style="bold underline"),
        _config(c),
        _headline(c),
        _verdicts(c),
        _gap(c),
        _bins(c),
        _keyed("By turn kind", c.turn_kinds, K.TURN_KIND),
    ]
    if len(c.gpus) > 1 or any(r["a_tokens"] == 0 or r["b_tokens"] == 0 for r in c.gpus):
        parts.append(_keyed("By gpu", c.gpus, K.GPU))
    parts.append(_steps(c))
    parts.append(_curves(c))
    parts += [Text(f"note: {visible(n)}", style="yellow") for n in c.notes]
    return RGroup(*[RGroup(p, Text("")) for p in parts])


def _curves(c: Comparison) -> RenderableType:
    if not CR.has_logs(c.curves):
        return Text(
            "Training curves: neither side has training logs attached (mismatchctl "
            "ingest-metrics FILE --run RUN); dump-derived curves are in --json and --html.",
            style="dim",
        )
    rows = (list(CR.CURVE_PAIR_HEADERS), CR.curve_pair_rows(c.curves))
    return _table("Training curves, aligned on step (means over the common steps)", rows)


def _config(c: Comparison) -> RenderableType:
    if not c.config:
        return Text("Configuration: no tag differs between the two sides.")
    table = Table(title="Configuration that differs", title_justify="left")
    for col in ("tag", "A", "B"):
        table.add_column(col)
    for row in c.config:
        table.add_row(*(Text(visible(row[k] or "-")) for k in ("key", "a", "b")))
    return fit(table)


def _table(title: str, rows: Rows, left: int = 1, bold: list[bool] | None = None) -> RenderableType:
    headers, body = rows
    table = Table(title=title, title_justify="left")
    for i, col in enumerate(headers):
        table.add_column(col, justify="left" if i < left else "right")
    for i, row in enumerate(body):
        style = "bold" if bold and bold[i] else ""
        table.add_row(*[Text(cell, style=style if j == 0 else "") for j, cell in enumerate(row)])
    return fit(table, left)


def _headline(c: Comparison) -> RenderableType:
    bold = [bool(r.get("significant")) for r in c.headline]
    return _table("Headline", headline_rows(c), bold=bold)


def _verdicts(c: Comparison) -> RenderableType:
    lines = [
        Text(("• " + visible(row["verdict"])), style="bold" if row.get("significant") else "")
        for row in c.headline
        if "verdict" in row
    ]
    return RGroup(Text("Verdict (bootstrap over whole sequences)", style="bold"), *lines)


def _gap(c: Comparison) -> RenderableType:
    return _table("Where the vllm_kl gap lives (turn kind x p_infer bin)", gap_rows(c), left=2)


def _bins(c: Comparison) -> RenderableType:
    return _table("By inference probability", bins_rows(c))


def _keyed(title: str, rows: list[dict[str, Any]], key: str) -> RenderableType:
    return _table(title, keyed_rows(rows, key))


def _steps(c: Comparison) -> RenderableType:
    rows = c.steps
    shown = (
        rows
        if len(rows) <= MAX_STEP_ROWS
        else rows[: MAX_STEP_ROWS // 2] + rows[-MAX_STEP_ROWS // 2 :]
    )
    title = "Per step vllm_kl (aligned on step)"
    if len(shown) < len(rows):
        title += (
            f": first and last {MAX_STEP_ROWS // 2} of {len(rows)} steps (all in --json / --html)"
        )
    table = Table(title=title, title_justify="left")
    for col in ("step", "A vllm_kl", "B vllm_kl", "B / A"):
        table.add_column(col, justify="right")
    for row in shown:
        table.add_row(
            str(row["step"]),
            num(row["a_vllm_kl"]),
            num(row["b_vllm_kl"]),
            num(row["vllm_kl_ratio"]),
        )
    return fit(table)
