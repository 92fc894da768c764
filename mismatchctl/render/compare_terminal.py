"""The terminal view of a comparison: configuration, headline with intervals, where it differs."""

from __future__ import annotations

from typing import Any

from rich.console import Group as RGroup
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from mismatchctl.analysis import splits as K
from mismatchctl.analysis.compare import Comparison
from mismatchctl.render.fmt import label, num, pct
from mismatchctl.stats import bin_label

MAX_STEP_ROWS = 30


def render_comparison(c: Comparison) -> RenderableType:
    a, b = c.a.selection.label, c.b.selection.label
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
    parts += [Text(f"note: {n}", style="yellow") for n in c.notes]
    return RGroup(*[RGroup(p, Text("")) for p in parts])


def _config(c: Comparison) -> RenderableType:
    if not c.config:
        return Text("Configuration: no tag differs between the two sides.")
    table = Table(title="Configuration that differs", title_justify="left")
    for col in ("tag", "A", "B"):
        table.add_column(col)
    for row in c.config:
        table.add_row(Text(row["key"]), Text(row["a"] or "-"), Text(row["b"] or "-"))
    return table


def _ci(row: dict[str, Any]) -> str:
    if row.get("ci_low") is None:
        return ""
    return f"{num(row['ci_low'], 3)} .. {num(row['ci_high'], 3)} ({row['ci_of']})"


def _headline(c: Comparison) -> RenderableType:
    table = Table(title="Headline", title_justify="left")
    for col in ("metric", "A", "B", "B - A", "B / A", "95% CI"):
        table.add_column(col, justify="left" if col in ("metric", "95% CI") else "right")
    for row in c.headline:
        style = "bold" if row.get("significant") else ""
        table.add_row(
            Text(row["metric"], style=style),
            num(row["a"]),
            num(row["b"]),
            num(row["difference"]),
            num(row["ratio"]),
            _ci(row),
        )
    return table


def _verdicts(c: Comparison) -> RenderableType:
    lines = [
        Text(("• " + row["verdict"]), style="bold" if row.get("significant") else "")
        for row in c.headline
        if "verdict" in row
    ]
    return RGroup(Text("Verdict (bootstrap over whole sequences)", style="bold"), *lines)


def _gap(c: Comparison) -> RenderableType:
    table = Table(
        title="Where the vllm_kl gap lives (turn kind x p_infer bin)", title_justify="left"
    )
    for col in ("turn kind", "p_infer bin", "contribution to B - A", "share of gap"):
        table.add_column(
            col, justify="right" if "contribution" in col or "share" in col else "left"
        )
    for cell in c.gap:
        table.add_row(
            str(cell[K.TURN_KIND]),
            bin_label(c.a.bin_edges, int(cell[K.BIN])),
            num(cell["contribution"]),
            pct(cell["share_of_gap"]),
        )
    return table


def _bins(c: Comparison) -> RenderableType:
    table = Table(title="By inference probability", title_justify="left")
    for col in (
        "p_infer bin",
        "A tokens",
        "B tokens",
        "A vllm_kl",
        "B vllm_kl",
        "B / A",
        "A kl share",
        "B kl share",
    ):
        table.add_column(col, justify="left" if col == "p_infer bin" else "right")
    for row in c.bins:
        table.add_row(
            bin_label(c.a.bin_edges, int(row["bin"])),
            pct(row["a_token_share"]),
            pct(row["b_token_share"]),
            num(row["a_vllm_kl"]),
            num(row["b_vllm_kl"]),
            num(row["vllm_kl_ratio"]),
            pct(row["a_kl_share"]),
            pct(row["b_kl_share"]),
        )
    return table


def _keyed(title: str, rows: list[dict[str, Any]], key: str) -> RenderableType:
    table = Table(title=title, title_justify="left")
    for col in (
        key,
        "A tokens",
        "B tokens",
        "A vllm_kl",
        "B vllm_kl",
        "B / A",
        "A log-ppl ρ",
        "B log-ppl ρ",
    ):
        table.add_column(col, justify="left" if col == key else "right")
    for row in rows:
        table.add_row(
            Text(label(row[key])),
            num(row["a_tokens"]),
            num(row["b_tokens"]),
            num(row["a_vllm_kl"]),
            num(row["b_vllm_kl"]),
            num(row["vllm_kl_ratio"]),
            num(row["a_log_ppl_pearson"]),
            num(row["b_log_ppl_pearson"]),
        )
    return table


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
    return table
