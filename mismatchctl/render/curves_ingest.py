"""What `ingest-metrics` says: the summary table, notes and exclusions, and its JSON."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from mismatchctl.curves.ingest import MetricsIngest
from mismatchctl.display import visible
from mismatchctl.render.fmt import step_span


def metrics_ingest_summary(result: MetricsIngest) -> RenderableType:
    commit, src = result.commit, result.commit.source
    if commit.status != "ingested":
        same = commit.same_as
        return Text(
            f"Nothing new for run `{visible(result.run)}`: {visible(src.path)} was already "
            "ingested with these "
            f"options{f' (on {same.ingested_at})' if same else ''}.",
            style="bold",
        )
    table = Table(
        title=f"Training metrics of run `{visible(result.run)}`",
        title_justify="left",
        show_header=False,
    )
    table.add_column(style="bold")
    table.add_column()
    steps = step_span(src.min_step, src.max_step) if src.min_step is not None else "-"
    rows = [
        ("source", f"{visible(src.path)} ({src.format})"),
        ("step column", visible(src.step_column)),
        ("metrics", f"{len(src.metrics)}: " + visible(", ".join(src.metrics))),
        ("steps", steps),
        ("values added", f"{commit.added:,}"),
        ("values already in the run (equal)", f"{commit.unchanged:,}"),
        ("earlier values replaced", f"{commit.replaced:,}"),
    ]
    rows += [
        (f"excluded: {visible(reason)}", f"{n:,}") for reason, n in sorted(src.excluded.items())
    ]
    rows += [
        (f"renamed: {visible(new)}", f"from {visible(old)}")
        for new, old in sorted(src.renamed.items())
    ]
    for label, value in rows:
        table.add_row(label, Text(value))
    notes = [Text(f"note: {visible(n)}", style="yellow") for n in src.notes]
    return Group(table, *notes)


def metrics_ingest_json(result: MetricsIngest) -> dict[str, Any]:
    commit = result.commit
    return {
        "run": result.run,
        "status": commit.status,
        "source": commit.source,
        "added": commit.added,
        "unchanged": commit.unchanged,
        "replaced": commit.replaced,
        "same_as": commit.same_as,
    }
