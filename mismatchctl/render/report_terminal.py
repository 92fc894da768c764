"""The terminal report: headline, probability bins, first vs later turns, steps, hardware."""

from __future__ import annotations

from rich.console import Group as RGroup
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from mismatchctl.analysis.report import Group, Report
from mismatchctl.display import visible
from mismatchctl.engines import plan as K
from mismatchctl.render import report_rows as R
from mismatchctl.render.curves_terminal import curves_view
from mismatchctl.render.fit import fit
from mismatchctl.render.fmt import band_text, kl_text, label, num, overflow_text, pct
from mismatchctl.stats import band, bin_label
from mismatchctl.stats import registry as M

MAX_STEP_ROWS = 30
SPARK = "▁▂▃▄▅▆▇█"


def render_report(report: Report) -> RenderableType:
    parts: list[RenderableType] = [_headline(report)]
    if len(report.selection.runs) > 1:
        parts.append(_runs_table(report))
    parts += [_bins_table(report), _turns_table(report), *_steps(report)]
    parts += curves_view(report.curves)
    if report.hardware is not None:
        parts.append(_hardware_table(report))
    parts += [_generic_table(report, split) for split in R.extra_splits(report)]
    return RGroup(*[RGroup(p, Text("")) for p in parts])


def _headline(report: Report) -> RenderableType:
    whole = report.whole()
    runs = report.selection.runs
    title = (
        f"Run {visible(runs[0].name)}"
        if len(runs) == 1
        else f"{len(runs)} runs: " + ", ".join(visible(r.name) for r in runs)
    )
    if report.selection.steps is not None:
        title += f", steps {report.selection.steps}"
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")  # tags and notes wrap, never elided
    if len(runs) == 1 and runs[0].tags:
        grid.add_row("tags", visible(" ".join(f"{k}={v}" for k, v in runs[0].tags.items())))
    if whole is None:
        grid.add_row("tokens", "0 model tokens in the selection")
        return RGroup(Text(title, style="bold underline"), grid)
    m = whole.metrics
    kinds = {g.by[K.TURN_KIND]: g.metrics for g in report.split(K.TURN_KIND)}
    steps = sorted({g.by[K.STEP] for g in report.split(K.RUN, K.STEP)})
    vband = band(m[M.VLLM_KL])
    grid.add_row(
        "tokens / sequences / steps", f"{num(m['tokens'])} / {num(m['sequences'])} / {len(steps)}"
    )
    why = overflow_text(m)
    value = kl_text(m[M.VLLM_KL], vband) if why is None else Text(why)
    grid.add_row(M.VLLM_KL, Text.assemble(value, "  (", band_text(vband), ")"))
    grid.add_row(M.KL_K1, num(m[M.KL_K1]))
    grid.add_row(M.ABS_LOG_RATIO_MEAN, num(m[M.ABS_LOG_RATIO_MEAN]))
    grid.add_row(M.PROB_PEARSON, num(m[M.PROB_PEARSON], 6))
    grid.add_row(
        "log_ppl_pearson first / later",
        f"{num(kinds.get('first', {}).get(M.LOG_PPL_PEARSON), 6)} / "
        f"{num(kinds.get('later', {}).get(M.LOG_PPL_PEARSON), 6)}",
    )
    ex = report.excluded
    grid.add_row(
        "excluded",
        f"{num(ex['empty_sequences'])} empty sequences, {num(ex['dropped_sequences'])} dropped at ingest",
    )
    grid.add_row("aggregation", report.aggregation)
    return RGroup(Text(title, style="bold underline"), grid)


def _runs_table(report: Report) -> RenderableType:
    table = Table(title="Runs", title_justify="left")
    for col in (
        "run",
        "tokens",
        "seqs",
        M.VLLM_KL,
        "band",
        M.KL_K1,
        "|r| mean",
        "prob ρ",
        "log-ppl ρ",
    ):
        table.add_column(col, justify="left" if col in ("run", "band") else "right")
    for g in report.split(K.RUN):
        m = g.metrics
        b = band(m[M.VLLM_KL])
        table.add_row(
            Text(label(g.by[K.RUN])),
            num(m["tokens"]),
            num(m["sequences"]),
            kl_text(m[M.VLLM_KL], b),
            band_text(b),
            num(m[M.KL_K1]),
            num(m[M.ABS_LOG_RATIO_MEAN]),
            num(m[M.PROB_PEARSON]),
            num(m[M.LOG_PPL_PEARSON]),
        )
    return fit(table)


def _bins_table(report: Report) -> RenderableType:
    table = Table(
        title="By inference probability p_infer = exp(rollout logprob)", title_justify="left"
    )
    for col in (
        "p_infer bin",
        "tokens",
        "token share",
        M.VLLM_KL,
        "kl share",
        "mean r",
        "p01 r",
        "p50 r",
        "p99 r",
    ):
        table.add_column(col, justify="left" if col == "p_infer bin" else "right")
    for g in report.split(K.BIN):
        m = g.metrics
        hot = (m.get(M.KL_SHARE) or 0) > 2 * (m.get(M.TOKEN_SHARE) or 0) and (
            m.get(M.KL_SHARE) or 0
        ) > 0.05
        table.add_row(
            bin_label(report.bin_edges, int(g.by[K.BIN])),
            num(m["tokens"]),
            pct(m.get(M.TOKEN_SHARE)),
            num(m[M.VLLM_KL]),
            Text(pct(m.get(M.KL_SHARE)), style="bold red" if hot else ""),
            num(m[M.LOG_RATIO_MEAN]),
            num(m.get(M.LOG_RATIO_P01)),
            num(m.get(M.LOG_RATIO_P50)),
            num(m.get(M.LOG_RATIO_P99)),
        )
    return fit(table)


TURN_ROWS = (
    "tokens",
    "sequences",
    M.VLLM_KL,
    M.KL_K1,
    M.ABS_LOG_RATIO_MEAN,
    M.PROB_ABS_DIFF_MEAN,
    M.PROB_PEARSON,
    M.ROLLOUT_LOG_PPL,
    M.TRAINER_LOG_PPL,
    M.LOG_PPL_ABS_DIFF,
    M.LOG_PPL_PEARSON,
    M.TRAINER_PPL,
)


def _turns_table(report: Report) -> RenderableType:
    kinds = {g.by[K.TURN_KIND]: g.metrics for g in report.split(K.TURN_KIND)}
    table = Table(title="First turn vs turns after a tool response", title_justify="left")
    table.add_column("metric")
    table.add_column("first", justify="right")
    table.add_column("later", justify="right")
    table.add_column("later / first", justify="right")
    first, later = kinds.get("first", {}), kinds.get("later", {})
    for name in TURN_ROWS:
        a, b = first.get(name), later.get(name)
        ratio = b / a if isinstance(a, int | float) and isinstance(b, int | float) and a else None
        table.add_row("segments" if name == "sequences" else name, num(a), num(b), num(ratio))
    return fit(table)


def _steps(report: Report) -> list[RenderableType]:
    out: list[RenderableType] = []
    for run in report.selection.names:
        groups = [g for g in report.split(K.RUN, K.STEP) if g.by[K.RUN] == run]
        if not groups:
            continue
        if len(groups) <= MAX_STEP_ROWS or R.every_step(report):
            out.append(_step_table(f"Per step: {visible(run)}", groups))
        else:
            out.append(_step_spark(run, groups))
    return out


def _step_table(title: str, groups: list[Group]) -> RenderableType:
    table = Table(title=title, title_justify="left")
    for col in ("step", "tokens", M.VLLM_KL, "band", M.KL_K1, "|r| mean", M.TRAINER_PPL):
        table.add_column(col, justify="left" if col == "band" else "right")
    for g in groups:
        m = g.metrics
        table.add_row(
            str(g.by[K.STEP]),
            num(m["tokens"]),
            kl_text(m[M.VLLM_KL], g.band),
            band_text(g.band),
            num(m[M.KL_K1]),
            num(m[M.ABS_LOG_RATIO_MEAN]),
            num(m[M.TRAINER_PPL]),
        )
    return fit(table)


def _step_spark(run: str, groups: list[Group]) -> RenderableType:
    import math

    values = [g.metrics[M.VLLM_KL] for g in groups]
    logs = [math.log10(v) if v and v > 0 and math.isfinite(v) else None for v in values]
    finite = [v for v in logs if v is not None]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    spark = Text()
    for g, v in zip(groups, logs, strict=True):
        i = 0 if v is None or hi == lo else round((v - lo) / (hi - lo) * (len(SPARK) - 1))
        spark.append(SPARK[i], style=band_text(g.band).style)
    worst = sorted(groups, key=lambda g: -(g.metrics[M.VLLM_KL] or 0))[:10]
    head = Text(
        f"Per step: {visible(run)} ({len(groups)} steps {groups[0].by[K.STEP]}..{groups[-1].by[K.STEP]}, "
        "log vllm_kl; full series in --json / --html)",
        style="bold",
    )
    return RGroup(
        head,
        spark,
        _step_table(f"Worst 10 steps: {visible(run)}", sorted(worst, key=lambda g: g.by[K.STEP])),
    )


def _hardware_table(report: Report) -> RenderableType:
    table = Table(
        title="By hardware (per-batch vllm_kl over each gpu's batches; bands: share of batches)",
        title_justify="left",
    )
    headers, rows, bands = R.hardware_rows(report)
    for i, col in enumerate(headers):
        table.add_column(col, justify="left" if i < 2 else "right")
    for row, b in zip(rows, bands, strict=True):
        cells = [Text(c) for c in row]
        cells[4] = Text(row[4], style=band_text(b).style)
        table.add_row(*cells)
    return fit(table)


def _generic_table(report: Report, split: K.Split) -> RenderableType:
    headers, rows, bands = R.split_rows(report, split)
    table = Table(title="By " + " x ".join(visible(k) for k in split), title_justify="left")
    for i, col in enumerate(headers):
        table.add_column(col, justify="left" if i < len(split) else "right")
    at = len(split) + 1  # the vllm_kl column
    for row, b in zip(rows, bands, strict=True):
        cells = [Text(c) for c in row]
        cells[at] = Text(row[at], style=band_text(b).style)
        table.add_row(*cells)
    return fit(table, len(split))
