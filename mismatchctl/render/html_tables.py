"""The terminal report's tables as HTML: headline, runs, bins, turns, steps, hardware, --by splits.

Formatting only: the numbers are the report's. Every cell goes through ``html.escape``.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from mismatchctl.analysis.report import Group, Report
from mismatchctl.engines import plan as K
from mismatchctl.render import report_rows as R
from mismatchctl.render.fmt import label, num, overflow_text, pct
from mismatchctl.render.report_terminal import TURN_ROWS
from mismatchctl.stats import band, bin_label
from mismatchctl.stats import registry as M

MAX_STEP_ROWS = 200  # beyond this, a run's step table shows its worst steps only
WORST_STEPS = 20


@dataclass(frozen=True)
class Cell:
    text: str
    cls: str = ""


CellLike = Cell | str


def table(headers: Sequence[str], rows: Sequence[Sequence[CellLike]], left: int = 1) -> str:
    """An HTML table; the first ``left`` columns are text, the others right-aligned numbers."""
    head = "".join(
        f'<th class="{"l" if i < left else "n"}">{html.escape(h)}</th>'
        for i, h in enumerate(headers)
    )
    body = "".join(
        "<tr>" + "".join(_td(c, i < left) for i, c in enumerate(row)) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _td(cell: CellLike, is_text: bool) -> str:
    c = cell if isinstance(cell, Cell) else Cell(cell)
    cls = " ".join(x for x in ("l" if is_text else "n", c.cls) if x)
    return f'<td class="{cls}">{html.escape(c.text)}</td>'


def band_cell(name: str | None) -> Cell:
    return Cell(name or "-", f"band band-{name}" if name else "")


def kl_cell(x: float | None, name: str | None) -> Cell:
    return Cell(num(x), f"kl-{name}" if name else "")


def headline(report: Report) -> str:
    """The key numbers of the whole selection, as a two-column table."""
    whole = report.whole()
    runs = report.selection.runs
    rows: list[list[CellLike]] = []
    for r in runs:
        tags = " ".join(f"{k}={v}" for k, v in r.tags.items()) or "(no tags)"
        rows.append([f"run {r.name}", tags])
    if whole is None:
        rows.append(["tokens", "0 model tokens in the selection"])
        return table(["", ""], rows, left=2)
    m = whole.metrics
    kinds = {g.by[K.TURN_KIND]: g.metrics for g in report.split(K.TURN_KIND)}
    steps = sorted({g.by[K.STEP] for g in report.split(K.RUN, K.STEP)})
    vband = band(m[M.VLLM_KL])
    ex = report.excluded
    rows += [
        [
            "tokens / sequences / steps",
            f"{num(m['tokens'])} / {num(m['sequences'])} / {len(steps)}",
        ],
        [
            M.VLLM_KL,
            Cell(
                f"{overflow_text(m) or num(m[M.VLLM_KL])}  ({vband or '-'})",
                f"kl-{vband}" if vband else "",
            ),
        ],
        [M.KL_K1, num(m[M.KL_K1])],
        [M.ABS_LOG_RATIO_MEAN, num(m[M.ABS_LOG_RATIO_MEAN])],
        [M.PROB_PEARSON, num(m[M.PROB_PEARSON], 6)],
        [
            "log_ppl_pearson first / later",
            f"{num(kinds.get('first', {}).get(M.LOG_PPL_PEARSON), 6)} / "
            f"{num(kinds.get('later', {}).get(M.LOG_PPL_PEARSON), 6)}",
        ],
        [
            "excluded",
            f"{num(ex.get('empty_sequences'))} empty sequences, "
            f"{num(ex.get('dropped_sequences'))} dropped at ingest",
        ],
        ["aggregation", report.aggregation],
    ]
    if report.selection.steps is not None:
        rows.append(["step range", str(report.selection.steps)])
    return table(["", ""], rows, left=2)


def runs_table(report: Report) -> str:
    rows = []
    for g in report.split(K.RUN):
        m = g.metrics
        b = band(m[M.VLLM_KL])
        rows.append(
            [
                label(g.by[K.RUN]),
                num(m["tokens"]),
                num(m["sequences"]),
                kl_cell(m[M.VLLM_KL], b),
                band_cell(b),
                num(m[M.KL_K1]),
                num(m[M.ABS_LOG_RATIO_MEAN]),
                num(m[M.PROB_PEARSON]),
                num(m[M.LOG_PPL_PEARSON]),
            ]
        )
    headers = ["run", "tokens", "seqs", M.VLLM_KL, "band", M.KL_K1, "|r| mean", "prob ρ"]
    return table([*headers, "log-ppl ρ"], rows)


def bins_table(report: Report) -> str:
    rows = []
    for g in report.split(K.BIN):
        m = g.metrics
        kl_share, token_share = m.get(M.KL_SHARE) or 0, m.get(M.TOKEN_SHARE) or 0
        hot = kl_share > 2 * token_share and kl_share > 0.05  # the terminal table's highlight
        rows.append(
            [
                bin_label(report.bin_edges, int(g.by[K.BIN])),
                num(m["tokens"]),
                pct(m.get(M.TOKEN_SHARE)),
                num(m[M.VLLM_KL]),
                Cell(pct(m.get(M.KL_SHARE)), "hot" if hot else ""),
                num(m[M.LOG_RATIO_MEAN]),
                num(m.get(M.LOG_RATIO_P01)),
                num(m.get(M.LOG_RATIO_P50)),
                num(m.get(M.LOG_RATIO_P99)),
            ]
        )
    headers = ["p_infer bin", "tokens", "token share", M.VLLM_KL, "kl share", "mean r"]
    return table([*headers, "p01 r", "p50 r", "p99 r"], rows)


def turns_table(report: Report) -> str:
    kinds = {g.by[K.TURN_KIND]: g.metrics for g in report.split(K.TURN_KIND)}
    first, later = kinds.get("first", {}), kinds.get("later", {})
    rows = []
    for name in TURN_ROWS:
        a, b = first.get(name), later.get(name)
        ratio = b / a if isinstance(a, int | float) and isinstance(b, int | float) and a else None
        rows.append(["segments" if name == "sequences" else name, num(a), num(b), num(ratio)])
    return table(["metric", "first", "later", "later / first"], rows)


def step_tables(report: Report) -> list[tuple[str, str, str]]:
    """Per run: (title, note, table); long runs show their worst steps."""
    out = []
    for run in report.selection.names:
        groups = [g for g in report.split(K.RUN, K.STEP) if g.by[K.RUN] == run]
        if not groups:
            continue
        note = ""
        if len(groups) > MAX_STEP_ROWS and not R.every_step(report):
            note = (
                f"{len(groups):,} steps ({groups[0].by[K.STEP]}..{groups[-1].by[K.STEP]}): the "
                f"{WORST_STEPS} with the largest vllm_kl, in step order; every step is in the "
                "per-step figure and in --json."
            )
            worst = sorted(groups, key=lambda g: -(g.metrics[M.VLLM_KL] or 0))[:WORST_STEPS]
            groups = sorted(worst, key=lambda g: g.by[K.STEP])
        out.append((run, note, _step_table(groups)))
    return out


def _step_table(groups: list[Group]) -> str:
    rows = [
        [
            str(g.by[K.STEP]),
            num(g.metrics["tokens"]),
            kl_cell(g.metrics[M.VLLM_KL], g.band),
            band_cell(g.band),
            num(g.metrics[M.KL_K1]),
            num(g.metrics[M.ABS_LOG_RATIO_MEAN]),
            num(g.metrics[M.TRAINER_PPL]),
        ]
        for g in groups
    ]
    return table(["step", "tokens", M.VLLM_KL, "band", M.KL_K1, "|r| mean", M.TRAINER_PPL], rows)


def hardware_table(report: Report) -> str:
    headers, rows, bands = R.hardware_rows(report)
    cells = [
        [*row[:4], Cell(row[4], f"kl-{b}" if b else ""), *row[5:]]
        for row, b in zip(rows, bands, strict=True)
    ]
    return table(headers, cells, left=2)


def extra_splits(report: Report) -> list[tuple[str, str]]:
    """(title, table) of each --by split that the fixed tables do not show."""
    out = []
    for split in R.extra_splits(report):
        headers, rows, bands = R.split_rows(report, split)
        at = len(split) + 1  # the vllm_kl column
        cells = [
            [*row[:at], Cell(row[at], f"kl-{b}" if b else ""), *row[at + 1 :]]
            for row, b in zip(rows, bands, strict=True)
        ]
        out.append(("By " + " × ".join(split), table(headers, cells, left=len(split))))
    return out
