"""Terminal views of the catalog: the runs table, one run's provenance, an ingest summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from mismatchctl.display import file_label, visible
from mismatchctl.ingest.run_ingest import IngestResult
from mismatchctl.render.fmt import step_span
from mismatchctl.store import RunInfo
from mismatchctl.store.catalog import SourceRecord
from mismatchctl.store.location import demo_store_hint


def steps_text(steps: list[int]) -> str:
    if not steps:
        return "-"
    if steps == list(range(steps[0], steps[-1] + 1)):
        return (
            f"{len(steps)} ({step_span(steps[0], steps[-1])})" if len(steps) > 1 else str(steps[0])
        )
    return f"{len(steps)} ({steps[0]}..{steps[-1]})"


def tags_text(tags: dict[str, str]) -> str:
    return visible(" ".join(f"{k}={v}" for k, v in tags.items())) or "-"


def no_runs_text(store: str) -> Text:
    """What `runs` says about an empty store: which store it looked in, how to fill it, and
    how to point at the demo's store when ``mismatchctl demo`` left one here."""
    return Text(
        f"No runs in the store {visible(store)} yet. Add one with `mismatchctl ingest DUMPS --run NAME`."
        + demo_store_hint(store)
    )


def runs_table(runs: list[RunInfo], store: str) -> RenderableType:
    if not runs:
        return no_runs_text(store)
    table = Table(title="Runs", title_justify="left")
    for name, kw in (
        ("run", {"style": "bold"}),
        ("tags", {"overflow": "fold"}),
        ("steps", {}),
        ("sequences", {"justify": "right"}),
        ("model tokens", {"justify": "right"}),
        ("sources", {"justify": "right"}),
        ("ingested at", {}),
    ):
        table.add_column(name, **kw)
    for r in runs:
        table.add_row(
            Text(visible(r.name)),
            Text(tags_text(r.tags)),
            steps_text(r.steps),
            f"{r.sequences:,}",
            f"{r.model_tokens:,}",
            str(len(r.sources)),
            r.ingested_at,
        )
    return table


def run_detail(r: RunInfo) -> RenderableType:
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    for label, value in (
        ("run", visible(r.name)),
        ("tags", tags_text(r.tags)),
        ("gpus (rows)", visible(", ".join(r.gpus)) or "-"),
        ("steps", steps_text(r.steps)),
        ("sequences", f"{r.sequences:,} ({r.empty_sequences:,} empty)"),
        ("model tokens", f"{r.model_tokens:,}"),
        ("tool tokens", f"{r.tool_tokens:,}"),
        ("dropped sequences", f"{r.dropped_sequences:,}"),
        ("duplicate sequences", duplicates_text(r.sources)),
        ("created at", r.created_at),
    ):
        head.add_row(label, Text(value))
    prov = Table(title="Provenance", title_justify="left")
    for name in ("#", "file", "format", "fingerprint", "kept", "dropped", "empty", "model tokens"):
        prov.add_column(
            name,
            justify="right" if name in ("#", "kept", "dropped", "empty") else "left",
            overflow="fold",  # a file name is cut into lines, never elided
        )
    lines: list[Text] = [Text("Sources:", style="bold")]
    for i, s in enumerate(r.sources, start=1):
        prov.add_row(
            str(i),
            Text(visible(Path(s.path).name)),
            s.format,
            s.fingerprint.split(":")[-1][:12],
            f"{s.sequences:,}",
            f"{s.dropped_sequences:,}",
            f"{s.empty_sequences:,}",
            f"{s.model_tokens:,}",
        )
        lines.append(Text(f"  {i}. {visible(s.path)} ({s.size:,} bytes, {tags_text(s.tags)})"))
        lines += [Text(f"     note: {visible(n)}", style="yellow") for n in s.notes]
        lines += [
            Text(f"     dropped {visible(k)}: {v}", style="yellow") for k, v in s.dropped.items()
        ]
        if s.duplicate_sequences:
            lines.append(
                Text(f"     duplicate sequences: {s.duplicate_sequences:,}", style="yellow")
            )
    return Group(head, Text(""), prov, *lines)


def duplicates_text(sources: list[SourceRecord]) -> str:
    """Exact repeats of a sequence of the same step, over the sources that counted them."""
    counted = [s.duplicate_sequences for s in sources if s.duplicate_sequences is not None]
    if not counted:
        return "n/a (ingested before they were counted)"
    text = f"{sum(counted):,}"
    if len(counted) < len(sources):
        text += (
            f" (n/a for {len(sources) - len(counted)} sources ingested before they were counted)"
        )
    return text


def ingest_summary(result: IngestResult) -> RenderableType:
    t = result.tally
    ingested = result.ingested
    if not ingested:
        skipped = [
            Text(f"  {visible(f.path)}: {f.status} (same content as {visible(f.same_as)})")
            for f in result.files
        ]
        return Group(
            Text(
                f"Nothing new for run `{visible(result.run)}`: every input is already there.",
                style="bold",
            ),
            *skipped,
        )
    table = Table(
        title=f"Ingested into run `{visible(result.run)}`", title_justify="left", show_header=False
    )
    table.add_column(style="bold")
    table.add_column(justify="right")
    rows: list[tuple[str, str]] = [
        ("files ingested", str(len(ingested))),
        ("files skipped (same content)", str(len(result.files) - len(ingested))),
        ("sequences", f"{t.sequences:,}"),
        ("model tokens", f"{t.model_tokens:,}"),
        ("tool tokens", f"{t.tool_tokens:,}"),
        ("prompt tokens", f"{t.prompt_tokens:,}"),
        ("padding tokens", f"{t.pad_tokens:,}"),
        ("empty sequences (no model token)", f"{t.empty_sequences:,}"),
        ("duplicate sequences (exact repeats in a step)", f"{t.duplicate_sequences:,}"),
        ("steps", steps_text(sorted(t.steps))),
        ("gpus", visible(", ".join(sorted(t.gpus))) or "-"),
        ("dropped sequences", f"{t.dropped_sequences:,}"),
    ]
    rows += [(f"  dropped: {visible(reason)}", f"{n:,}") for reason, n in sorted(t.dropped.items())]
    if t.padding_kept:
        rows.append(("padding kept as model tokens (--allow-padding)", f"{t.padding_kept:,}"))
    for label, value in rows:
        table.add_row(label, value)
    lines: list[RenderableType] = [table]
    for f in result.files:
        if f.status != "ingested":
            lines.append(
                Text(
                    f"skipped {visible(f.path)}: {f.status} (same content as {visible(f.same_as)})"
                )
            )
        elif f.record and f.record.notes:
            lines += [
                Text(f"note: {file_label(f.path)}: {visible(n)}", style="yellow")
                for n in f.record.notes
            ]
    if t.dropped_ids:
        lines.append(Text("dropped samples: " + visible("; ".join(t.dropped_ids)), style="yellow"))
    lines += [Text(f"Warning: {visible(w)}", style="bold yellow") for w in result.warnings]
    return Group(*lines)


def ingest_json(result: IngestResult) -> dict[str, Any]:
    return {
        "run": result.run,
        "store": str(result.store),
        "files": [
            {"path": str(f.path), "format": f.format, "status": f.status, "same_as": f.same_as}
            for f in result.files
        ],
        "totals": result.tally,
        "warnings": result.warnings,
    }
