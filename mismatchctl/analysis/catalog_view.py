"""What the store says about itself, as sections: the runs, one run's provenance, what an ingest
(or an ingest-metrics) added, and the parts `runs check` found damaged; and their JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mismatchctl.analysis import sections as sec
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


def no_runs(store: str) -> sec.Lines:
    """What an empty store says: which store it is, how to fill it, and how to point at the
    demo's store when ``mismatchctl demo`` left one here."""
    text = f"No runs in the store {store} yet. Add one with `mismatchctl ingest DUMPS --run NAME`."
    return sec.Lines("no-runs", None, [sec.Line(text + demo_store_hint(store))])


def runs_sections(runs: list[RunInfo], store: str) -> list[sec.Section]:
    if not runs:
        return [no_runs(store)]
    rows = [
        {"run": r.name, "tags": tags_text(r.tags), "steps": steps_text(r.steps), "sequences": r.sequences,
         "tokens": r.model_tokens, "sources": len(r.sources), "at": r.ingested_at}
        for r in runs
    ]  # fmt: skip
    columns = [
        sec.Column("run", "run", sec.Kind.LABEL), sec.Column("tags", "tags", sec.Kind.TEXT),
        sec.Column("steps", "steps", sec.Kind.LABEL), sec.Column("sequences", "sequences", sec.Kind.COUNT),
        sec.Column("tokens", "model tokens", sec.Kind.COUNT),
        sec.Column("sources", "sources", sec.Kind.COUNT), sec.Column("at", "ingested at", sec.Kind.LABEL),
    ]  # fmt: skip
    return [sec.Table("runs", "Runs", columns, rows)]


def run_sections(r: RunInfo) -> list[sec.Section]:
    facts = [
        sec.Fact("run", r.name, sec.Kind.LABEL),
        sec.Fact("tags", tags_text(r.tags), sec.Kind.TEXT),
        sec.Fact("gpus (rows)", ", ".join(r.gpus) or "-", sec.Kind.TEXT),
        sec.Fact("steps", steps_text(r.steps), sec.Kind.TEXT),
        sec.Fact("sequences", f"{r.sequences:,} ({r.empty_sequences:,} empty)", sec.Kind.TEXT),
        sec.Fact("model tokens", r.model_tokens, sec.Kind.COUNT),
        sec.Fact("tool tokens", r.tool_tokens, sec.Kind.COUNT),
        sec.Fact("dropped sequences", r.dropped_sequences, sec.Kind.COUNT),
        sec.Fact("duplicate sequences", duplicates_text(r.sources), sec.Kind.TEXT),
        sec.Fact("prompt lengths", prompt_lengths_text(r.sources), sec.Kind.TEXT),
        sec.Fact("attributes", attributes_text(r.sources), sec.Kind.TEXT),
        sec.Fact("created at", r.created_at, sec.Kind.TEXT),
    ]
    rows = [
        {"i": i, "file": Path(s.path).name, "format": s.format,
         "fingerprint": s.fingerprint.split(":")[-1][:12], "kept": s.sequences,
         "dropped": s.dropped_sequences, "empty": s.empty_sequences, "tokens": s.model_tokens}
        for i, s in enumerate(r.sources, start=1)
    ]  # fmt: skip
    columns = [
        sec.Column("i", "#", sec.Kind.COUNT), sec.Column("file", "file", sec.Kind.LABEL),
        sec.Column("format", "format", sec.Kind.LABEL),
        sec.Column("fingerprint", "fingerprint", sec.Kind.LABEL),
        sec.Column("kept", "kept", sec.Kind.COUNT), sec.Column("dropped", "dropped", sec.Kind.COUNT),
        sec.Column("empty", "empty", sec.Kind.COUNT), sec.Column("tokens", "model tokens", sec.Kind.COUNT),
    ]  # fmt: skip
    lines = []
    for i, s in enumerate(r.sources, start=1):
        lines.append(sec.Line(f"  {i}. {s.path} ({s.size:,} bytes, {tags_text(s.tags)})"))
        lines += [sec.Line(f"     note: {n}", "warn") for n in s.notes]
        lines += [sec.Line(f"     dropped {k}: {v}", "warn") for k, v in s.dropped.items()]
        if s.duplicate_sequences:
            lines.append(sec.Line(f"     duplicate sequences: {s.duplicate_sequences:,}", "warn"))
    return [
        sec.Facts("run", f"Run {r.name}", facts),
        sec.Table("provenance", "Provenance", columns, rows),
        sec.Lines("sources", "Sources:", lines),
    ]


def prompt_lengths_text(sources: list[SourceRecord]) -> str:
    """How many sequences have a known prompt length (where ``kv_position`` counts from)."""
    known = sum(s.prompt_lengths or 0 for s in sources)
    total = sum(s.sequences for s in sources)
    text = f"{known:,} of {total:,} sequences"
    if known < total:
        text += " (kv_position of the others counts from the response's first position)"
    return text


def attributes_text(sources: list[SourceRecord], top: int = 5) -> str:
    """Each attribute (``attr:NAME``) with its most frequent values and their sequence counts,
    merged over the sources."""
    merged: dict[str, dict[str | None, int]] = {}
    more: set[str] = set()
    for s in sources:
        for name, summary in (s.attributes or {}).items():
            counts = merged.setdefault(name, {})
            for value, n in summary["values"]:
                counts[value] = counts.get(value, 0) + n
            if summary["more"] or summary["distinct"] > len(summary["values"]):
                more.add(name)
    if not merged:
        return "none"
    parts = []
    for name in sorted(merged):
        counts = sorted(merged[name].items(), key=lambda kv: (-kv[1], kv[0] is None, kv[0] or ""))
        shown_values = ", ".join(f"{'null' if v is None else v} ({n:,})" for v, n in counts[:top])
        rest = " ..." if name in more or len(counts) > top else ""
        parts.append(f"{name}: {shown_values}{rest}")
    return "; ".join(parts)


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


def ingest_sections(result: IngestResult) -> list[sec.Section]:
    t = result.tally
    skipped = [
        sec.Line(f"skipped {f.path}: {f.status} (same content as {f.same_as})")
        for f in result.files
        if f.status != "ingested"
    ]
    if not result.ingested:
        title = f"Nothing new for run `{result.run}`: every input is already there."
        return [
            sec.Lines("ingest", title, [sec.Line(x.text.removeprefix("skipped ")) for x in skipped])
        ]
    facts = [
        sec.Fact("files ingested", len(result.ingested), sec.Kind.COUNT),
        sec.Fact(
            "files skipped (same content)", len(result.files) - len(result.ingested), sec.Kind.COUNT
        ),
        sec.Fact("sequences", t.sequences, sec.Kind.COUNT),
        sec.Fact("model tokens", t.model_tokens, sec.Kind.COUNT),
        sec.Fact("tool tokens", t.tool_tokens, sec.Kind.COUNT),
        sec.Fact("prompt tokens", t.prompt_tokens, sec.Kind.COUNT),
        sec.Fact("padding tokens", t.pad_tokens, sec.Kind.COUNT),
        sec.Fact("empty sequences (no model token)", t.empty_sequences, sec.Kind.COUNT),
        sec.Fact(
            "duplicate sequences (exact repeats in a step)", t.duplicate_sequences, sec.Kind.COUNT
        ),
        sec.Fact("steps", steps_text(sorted(t.steps)), sec.Kind.TEXT),
        sec.Fact("gpus", ", ".join(sorted(t.gpus)) or "-", sec.Kind.TEXT),
        sec.Fact("dropped sequences", t.dropped_sequences, sec.Kind.COUNT),
    ]
    facts += [
        sec.Fact(f"  dropped: {reason}", n, sec.Kind.COUNT)
        for reason, n in sorted(t.dropped.items())
    ]
    if t.padding_kept:
        facts.append(
            sec.Fact(
                "padding kept as model tokens (--allow-padding)", t.padding_kept, sec.Kind.COUNT
            )
        )
    lines = [*skipped, *note_lines(result)]
    if t.dropped_ids:
        lines.append(sec.Line("dropped samples: " + "; ".join(t.dropped_ids), "warn"))
    lines += [sec.Line(f"Warning: {w}", "bold") for w in result.warnings]
    out: list[sec.Section] = [sec.Facts("ingest", f"Ingested into run `{result.run}`", facts)]
    if lines:
        out.append(sec.Lines("ingest-notes", None, lines))
    return out


def note_lines(result: IngestResult) -> list[sec.Line]:
    """The ingested files' notes, a note several files share written once with how many files
    (the first and last named): an ingest of a thousand files is not a thousand times the same
    line."""
    files: dict[str, list[str]] = {}
    for f in result.files:
        if f.status == "ingested" and f.record:
            for n in f.record.notes:
                files.setdefault(n, []).append(file_label(f.path))
    lines = []
    for note, labels in files.items():
        if len(labels) == 1:
            lines.append(sec.Line(f"note: {labels[0]}: {note}", "warn"))
        else:
            which = (
                f"{labels[0]}, {labels[1]}" if len(labels) == 2 else f"{labels[0]} ... {labels[-1]}"
            )
            lines.append(sec.Line(f"note: {len(labels)} files ({which}): {note}", "warn"))
    return lines


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


def metrics_ingest_sections(result: MetricsIngest) -> list[sec.Section]:
    commit, src = result.commit, result.commit.source
    if commit.status != "ingested":
        same = commit.same_as
        when = f" (on {same.ingested_at})" if same else ""
        text = f"Nothing new for run `{result.run}`: {src.path} was already ingested with these options{when}."
        return [sec.Lines("metrics", None, [sec.Line(text, "bold")])]
    steps = step_span(src.min_step, src.max_step) if src.min_step is not None else "-"
    facts = [
        sec.Fact("source", f"{src.path} ({src.format})", sec.Kind.TEXT),
        sec.Fact("step column", src.step_column, sec.Kind.TEXT),
        sec.Fact("metrics", f"{len(src.metrics)}: " + ", ".join(src.metrics), sec.Kind.TEXT),
        sec.Fact("steps", steps, sec.Kind.TEXT),
        sec.Fact("values added", commit.added, sec.Kind.COUNT),
        sec.Fact("values already in the run (equal)", commit.unchanged, sec.Kind.COUNT),
        sec.Fact("earlier values replaced", commit.replaced, sec.Kind.COUNT),
    ]
    facts += [
        sec.Fact(f"excluded: {reason}", n, sec.Kind.COUNT)
        for reason, n in sorted(src.excluded.items())
    ]
    facts += [
        sec.Fact(f"renamed: {new}", f"from {old}", sec.Kind.TEXT)
        for new, old in sorted(src.renamed.items())
    ]
    out: list[sec.Section] = [
        sec.Facts("metrics", f"Training metrics of run `{result.run}`", facts)
    ]
    if src.notes:
        out.append(
            sec.Lines("metrics-notes", None, [sec.Line(f"note: {n}", "warn") for n in src.notes])
        )
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


def check_sections(found: dict[str, list[Damage]], store: str) -> list[sec.Section]:
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
        sec.Column("run", "run", sec.Kind.LABEL), sec.Column("status", "status", sec.Kind.VERDICT),
        sec.Column("part", "part", sec.Kind.TEXT), sec.Column("problem", "problem", sec.Kind.TEXT),
    ]  # fmt: skip
    return [sec.Table("check", "", columns, rows)]
