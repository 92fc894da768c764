"""What the store says about itself, as sections: the runs, one run's provenance, what an ingest
(or an ingest-metrics) added, and the parts `runs check` found damaged; and their JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mismatchctl.analysis.sections import Column, Fact, Facts, Kind, Line, Lines, Section, Table
from mismatchctl.curves.ingest import MetricsIngest
from mismatchctl.display import file_label
from mismatchctl.engines.plan import step_span
from mismatchctl.ingest.run_ingest import IngestResult
from mismatchctl.store import RunInfo
from mismatchctl.store.catalog import SourceRecord
from mismatchctl.store.integrity import Damage
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
    return " ".join(f"{k}={v}" for k, v in tags.items()) or "-"


def no_runs(store: str) -> Lines:
    """What an empty store says: which store it is, how to fill it, and how to point at the
    demo's store when ``mismatchctl demo`` left one here."""
    text = f"No runs in the store {store} yet. Add one with `mismatchctl ingest DUMPS --run NAME`."
    return Lines("no-runs", None, [Line(text + demo_store_hint(store))])


def runs_sections(runs: list[RunInfo], store: str) -> list[Section]:
    if not runs:
        return [no_runs(store)]
    rows = [
        {"run": r.name, "tags": tags_text(r.tags), "steps": steps_text(r.steps), "sequences": r.sequences,
         "tokens": r.model_tokens, "sources": len(r.sources), "at": r.ingested_at}
        for r in runs
    ]  # fmt: skip
    columns = [
        Column("run", "run", Kind.LABEL),
        Column("tags", "tags", Kind.TEXT),
        Column("steps", "steps", Kind.LABEL),
        Column("sequences", "sequences", Kind.COUNT),
        Column("tokens", "model tokens", Kind.COUNT),
        Column("sources", "sources", Kind.COUNT),
        Column("at", "ingested at", Kind.LABEL),
    ]
    return [Table("runs", "Runs", columns, rows)]


def run_sections(r: RunInfo) -> list[Section]:
    facts = [
        Fact("run", r.name, Kind.LABEL),
        Fact("tags", tags_text(r.tags), Kind.TEXT),
        Fact("gpus (rows)", ", ".join(r.gpus) or "-", Kind.TEXT),
        Fact("steps", steps_text(r.steps), Kind.TEXT),
        Fact("sequences", f"{r.sequences:,} ({r.empty_sequences:,} empty)", Kind.TEXT),
        Fact("model tokens", r.model_tokens, Kind.COUNT),
        Fact("tool tokens", r.tool_tokens, Kind.COUNT),
        Fact("dropped sequences", r.dropped_sequences, Kind.COUNT),
        Fact("duplicate sequences", duplicates_text(r.sources), Kind.TEXT),
        Fact("created at", r.created_at, Kind.TEXT),
    ]
    rows = [
        {"i": i, "file": Path(s.path).name, "format": s.format,
         "fingerprint": s.fingerprint.split(":")[-1][:12], "kept": s.sequences,
         "dropped": s.dropped_sequences, "empty": s.empty_sequences, "tokens": s.model_tokens}
        for i, s in enumerate(r.sources, start=1)
    ]  # fmt: skip
    columns = [
        Column("i", "#", Kind.COUNT),
        Column("file", "file", Kind.LABEL),
        Column("format", "format", Kind.LABEL),
        Column("fingerprint", "fingerprint", Kind.LABEL),
        Column("kept", "kept", Kind.COUNT),
        Column("dropped", "dropped", Kind.COUNT),
        Column("empty", "empty", Kind.COUNT),
        Column("tokens", "model tokens", Kind.COUNT),
    ]
    lines = []
    for i, s in enumerate(r.sources, start=1):
        lines.append(Line(f"  {i}. {s.path} ({s.size:,} bytes, {tags_text(s.tags)})"))
        lines += [Line(f"     note: {n}", "warn") for n in s.notes]
        lines += [Line(f"     dropped {k}: {v}", "warn") for k, v in s.dropped.items()]
        if s.duplicate_sequences:
            lines.append(Line(f"     duplicate sequences: {s.duplicate_sequences:,}", "warn"))
    return [
        Facts("run", f"Run {r.name}", facts),
        Table("provenance", "Provenance", columns, rows),
        Lines("sources", "Sources:", lines),
    ]


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


def ingest_sections(result: IngestResult) -> list[Section]:
    t = result.tally
    skipped = [
        Line(f"skipped {f.path}: {f.status} (same content as {f.same_as})")
        for f in result.files
        if f.status != "ingested"
    ]
    if not result.ingested:
        title = f"Nothing new for run `{result.run}`: every input is already there."
        return [Lines("ingest", title, [Line(x.text.removeprefix("skipped ")) for x in skipped])]
    facts = [
        Fact("files ingested", len(result.ingested), Kind.COUNT),
        Fact("files skipped (same content)", len(result.files) - len(result.ingested), Kind.COUNT),
        Fact("sequences", t.sequences, Kind.COUNT),
        Fact("model tokens", t.model_tokens, Kind.COUNT),
        Fact("tool tokens", t.tool_tokens, Kind.COUNT),
        Fact("prompt tokens", t.prompt_tokens, Kind.COUNT),
        Fact("padding tokens", t.pad_tokens, Kind.COUNT),
        Fact("empty sequences (no model token)", t.empty_sequences, Kind.COUNT),
        Fact("duplicate sequences (exact repeats in a step)", t.duplicate_sequences, Kind.COUNT),
        Fact("steps", steps_text(sorted(t.steps)), Kind.TEXT),
        Fact("gpus", ", ".join(sorted(t.gpus)) or "-", Kind.TEXT),
        Fact("dropped sequences", t.dropped_sequences, Kind.COUNT),
    ]
    facts += [
        Fact(f"  dropped: {reason}", n, Kind.COUNT) for reason, n in sorted(t.dropped.items())
    ]
    if t.padding_kept:
        facts.append(
            Fact("padding kept as model tokens (--allow-padding)", t.padding_kept, Kind.COUNT)
        )
    lines = list(skipped)
    for f in result.files:
        if f.status == "ingested" and f.record and f.record.notes:
            lines += [Line(f"note: {file_label(f.path)}: {n}", "warn") for n in f.record.notes]
    if t.dropped_ids:
        lines.append(Line("dropped samples: " + "; ".join(t.dropped_ids), "warn"))
    lines += [Line(f"Warning: {w}", "bold") for w in result.warnings]
    out: list[Section] = [Facts("ingest", f"Ingested into run `{result.run}`", facts)]
    if lines:
        out.append(Lines("ingest-notes", None, lines))
    return out


def ingest_dict(result: IngestResult) -> dict[str, Any]:
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


def metrics_ingest_sections(result: MetricsIngest) -> list[Section]:
    commit, src = result.commit, result.commit.source
    if commit.status != "ingested":
        same = commit.same_as
        when = f" (on {same.ingested_at})" if same else ""
        text = f"Nothing new for run `{result.run}`: {src.path} was already ingested with these options{when}."
        return [Lines("metrics", None, [Line(text, "bold")])]
    steps = step_span(src.min_step, src.max_step) if src.min_step is not None else "-"
    facts = [
        Fact("source", f"{src.path} ({src.format})", Kind.TEXT),
        Fact("step column", src.step_column, Kind.TEXT),
        Fact("metrics", f"{len(src.metrics)}: " + ", ".join(src.metrics), Kind.TEXT),
        Fact("steps", steps, Kind.TEXT),
        Fact("values added", commit.added, Kind.COUNT),
        Fact("values already in the run (equal)", commit.unchanged, Kind.COUNT),
        Fact("earlier values replaced", commit.replaced, Kind.COUNT),
    ]
    facts += [
        Fact(f"excluded: {reason}", n, Kind.COUNT) for reason, n in sorted(src.excluded.items())
    ]
    facts += [
        Fact(f"renamed: {new}", f"from {old}", Kind.TEXT)
        for new, old in sorted(src.renamed.items())
    ]
    out: list[Section] = [Facts("metrics", f"Training metrics of run `{result.run}`", facts)]
    if src.notes:
        out.append(Lines("metrics-notes", None, [Line(f"note: {n}", "warn") for n in src.notes]))
    return out


def metrics_ingest_dict(result: MetricsIngest) -> dict[str, Any]:
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


def check_sections(found: dict[str, list[Damage]], store: str) -> list[Section]:
    if not found:
        return [no_runs(store)]
    rows: list[dict[str, Any]] = []
    for run, damage in found.items():
        if not damage:
            rows.append({"run": run, "status": "whole", "part": "", "problem": ""})
        rows += [
            {"run": run, "status": "damaged", "part": d.part, "problem": d.problem} for d in damage
        ]
    columns = [
        Column("run", "run", Kind.LABEL),
        Column("status", "status", Kind.VERDICT),
        Column("part", "part", Kind.TEXT),
        Column("problem", "problem", Kind.TEXT),
    ]
    return [Table("check", "", columns, rows)]
