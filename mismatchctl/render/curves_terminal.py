"""The training-curve part of the terminal report: per run, correlations, events, per-step table."""

from __future__ import annotations

from rich.console import Group as RGroup
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from mismatchctl.curves.analysis import RunCurves
from mismatchctl.curves.series import KL
from mismatchctl.display import visible
from mismatchctl.render import curves_rows as R
from mismatchctl.render.fit import fit
from mismatchctl.render.fmt import band_text, kl_text


def curves_view(curves: dict[str, RunCurves]) -> list[RenderableType]:
    """One block per run that has training logs; runs with dump curves only get one line."""
    out: list[RenderableType] = []
    bare = [run for run, c in curves.items() if not c.has_logs]
    for c in curves.values():
        if c.has_logs:
            out.append(run_block(c))
    if bare:
        out.append(
            Text(
                "Training curves: no training logs attached to "
                + ", ".join(visible(run) for run in bare)
                + " (add them with `mismatchctl ingest-metrics FILE --run RUN`; per-step "
                "correlations with the dump-derived curves are in --json and --html).",
                style="dim",
            )
        )
    return out


def run_block(c: RunCurves) -> RenderableType:
    links = Table(
        title=f"Training curves: {visible(c.run)} (each curve against per-step vllm_kl)",
        title_justify="left",
    )
    for col in R.LINK_COLUMNS:
        links.add_column(
            col, justify="right" if col in ("steps", "pearson", "spearman") else "left"
        )
    for row in R.link_rows(c):
        links.add_row(*[Text(x) for x in row])
    parts: list[RenderableType] = [fit(links)]
    parts += [Text(f"  {line}") for line in R.event_lines(c)]
    parts += [Text(f"  note: {line}", style="yellow") for line in R.join_notes(c)]
    parts.append(step_table(c))
    return RGroup(*parts)


def step_table(c: RunCurves) -> RenderableType:
    steps, note = R.table_steps(c)
    cols = R.table_columns(c)
    table = Table(title=f"Per step: {visible(c.run)}, training curves", title_justify="left")
    table.add_column("step", justify="right")
    table.add_column(KL, justify="right")
    table.add_column("band")
    for name in cols[1:]:
        table.add_column(visible(name), justify="right", overflow="fold")
    for step in steps:
        b = R.step_band(c, step)
        row: list[Text | str] = [
            str(step),
            kl_text(R.value_at(c.series[KL], step), b),
            band_text(b),
        ]
        row += [R.cell(R.value_at(c.series[n], step)) for n in cols[1:]]
        table.add_row(*row)
    if note:
        table.caption = note
    return fit(table)
