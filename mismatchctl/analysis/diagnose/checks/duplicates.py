"""Exact duplicate sequences (a double write), as counted at ingest."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import (
    DATA,
    MAX_LISTED,
    NA,
    Check,
    CheckEvidence,
    advice_if,
    grade,
    renamed,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.stats import registry as M

NAME = "duplicates"
LAYER = DATA
TITLE = "Exact duplicate sequences (double writes)"
ORDER = 60
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    DUPLICATE_FAIL_SHARE: float = 1e-3
    """Exact duplicate sequences (a double write) above this share of the sequences: fail (any:
    warn). A repeated sequence weighs twice in every mean; from 0.1% that reaches the third
    significant digit the report prints, and a real double write repeats a whole batch or
    file."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Source(CheckEvidence):
    """A source file with duplicate sequences, as counted at its ingest."""

    run: str
    path: str
    duplicate_sequences: int


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """The duplicate sequences of the sources counted, their sequences and the share; the
    sources that hold some (the first ``MAX_LISTED``) and how many were not counted."""

    duplicate_sequences: int
    sequences: int = renamed(M.SEQUENCES.key)
    share: float
    sources: list[Source]
    sources_not_counted: int


def run(ctx: Context) -> Check:
    """Exact duplicate sequences, as counted at ingest (per source file, whatever the step
    range of the selection); n/a for sources ingested before they were counted."""
    sel = ctx.report.selection
    sources = [
        (run.name, s)
        for run in sel.runs
        for s in run.sources
        if all(s.tags.get(k) == v for k, v in sel.tags.items())
    ]
    counted = [(run, s) for run, s in sources if s.duplicate_sequences is not None]
    if not counted:
        return Check(
            LAYER, NAME, TITLE, NA,
            "not counted: the sources were ingested before duplicate sequences were counted "
            "(re-ingest them into a new run to count)",
        )  # fmt: skip
    dup = sum(s.duplicate_sequences or 0 for _, s in counted)
    total = sum(s.sequences for _, s in counted)
    share = dup / total if total else 0.0
    evidence = Evidence(
        duplicate_sequences=dup,
        sequences=total,
        share=share,
        sources=[
            Source(run=run, path=s.path, duplicate_sequences=s.duplicate_sequences)
            for run, s in counted
            if s.duplicate_sequences
        ][:MAX_LISTED],
        sources_not_counted=len(sources) - len(counted),
    )
    verdict = grade(share >= T.DUPLICATE_FAIL_SHARE, dup > 0)
    finding = (
        f"{dup} of {total} sequences ({pct(share)}) repeat an earlier sequence of the same step "
        "exactly (sample id, tokens and both logprob vectors)"
    )
    if len(counted) < len(sources):
        finding += f"; not counted in {len(sources) - len(counted)} source(s) ingested before"
    advice = (
        "a batch was written twice (a dump function called twice, or several ranks writing the "
        "same samples): ingest one copy; `mismatchctl runs show RUN` lists each source's count"
    )
    return Check(LAYER, NAME, TITLE, verdict, finding, evidence, advice_if(verdict, advice))
