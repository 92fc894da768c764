"""A diagnosis as sections: the verdict first (the cause, what it explains, the evidence that
decided it, its runner-up and why it lost, the next step), then one table of checks per layer,
in the order to fix them (each check with its finding, what to try next and its evidence)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mismatchctl.analysis import sections as sec
from mismatchctl.analysis.diagnose.causes.hypothesis import QUIET
from mismatchctl.analysis.diagnose.causes.row import CauseRow
from mismatchctl.analysis.diagnose.check import FAIL, WARN, Check
from mismatchctl.analysis.diagnose.diagnosis import Diagnosis, layers

if TYPE_CHECKING:
    from mismatchctl.analysis.diagnose.checks import cause

LAYER_ORDER_NOTE = (
    "Checks run from data integrity to the objective: fix the first layer that fails before "
    "the ones after it. Evidence of every check: --json or --html."
)


def verdict_facts(d: Diagnosis, title: str | None = None) -> sec.Facts:
    """The verdict and the cause that decided it: the first thing a reader sees."""
    counts = ", ".join(f"{n} {v}" for v, n in d.counts().items())
    facts = [sec.Fact("verdict", d.verdict, sec.Kind.VERDICT, remark=f"({counts})")]
    facts += cause_facts(d.weighing, d.cause_check.finding if d.cause_check else "")
    return sec.Facts(sec.slug("verdict", d.label), title or f"Diagnosis: {d.label}", facts)


def cause_facts(weighing: cause.Evidence | None, finding: str) -> list[sec.Fact]:
    """The named cause, what it explains and why, the second causes, the runner-up, the next
    step (the JSON's ``cause``, in the same order); ``finding``: the cause check's, said when
    no cause is named."""
    head = weighing.named if weighing is not None else None
    if weighing is None or head is None:
        key = weighing.cause if weighing is not None else "none"
        return [sec.Fact("cause", finding or key, sec.Kind.TEXT)]
    label = head.label + (f": {head.variant}" if head.variant else "")
    out = [sec.Fact("cause", label, sec.Kind.TEXT)]
    if head.where:
        out.append(sec.Fact("where", head.where, sec.Kind.TEXT))
    out.append(sec.Fact("explains", head.share, sec.Kind.SHARE, remark="of the excess"))
    out.append(sec.Fact("evidence", head.because, sec.Kind.TEXT))
    for also in weighing.also:
        out.append(sec.Fact("also", f"{also.label}: {also.because}", sec.Kind.TEXT))
    r = runner_up(weighing.runner_ups)
    if r is not None:
        out.append(sec.Fact("runner-up", f"{r.label}: {r.lost or ''}", sec.Kind.TEXT))
    if head.next:
        out.append(sec.Fact("next", head.next, sec.Kind.TEXT))
    if head.correction:
        out.append(sec.Fact("correction", head.correction, sec.Kind.TEXT))
    return out


def runner_up(rows: list[CauseRow]) -> CauseRow | None:
    """The runner-up the verdict shows: the first whose checks fired, else the first quiet one
    with more to say than that (the twin the data cannot tell from the named cause, what a
    truncation's tail holds); None when every other cause is simply quiet."""
    alarmed = [r for r in rows if r.verdict in (WARN, FAIL)]
    if alarmed:
        return alarmed[0]
    return next((r for r in rows if r.lost and r.lost != QUIET), None)


def _row(c: Check, label: str) -> sec.CheckRow:
    anchor = sec.slug("check", label, c.name)
    evidence = c.evidence_dict()  # the section holds the evidence as the JSON writes it
    return sec.CheckRow(c.layer, c.verdict, c.name, c.title, c.finding, c.next, evidence, anchor)


def diagnosis_sections(
    d: Diagnosis, brief: bool = False, title: str | None = None
) -> list[sec.Section]:
    """The verdict and its cause, then every layer's checks; ``brief`` (``diagnose -q``): the
    verdict, its cause and the checks that fail or warn, failures first, nothing else."""
    out: list[sec.Section] = [verdict_facts(d, title)]
    if brief:
        rows = [_row(c, d.label) for v in (FAIL, WARN) for c in d.checks if c.verdict == v]
        if rows:
            out.append(sec.Checks(sec.slug("failing", d.label), "", rows, brief=True))
        return out
    for layer, checks in layers(d):
        out.append(
            sec.Checks(
                sec.slug("layer", d.label, layer),
                layer.capitalize(),
                [_row(c, d.label) for c in checks],
            )
        )
    out.append(
        sec.Lines(sec.slug("diagnosis-note", d.label), None, [sec.Line(LAYER_ORDER_NOTE, "dim")])
    )
    return out


def diagnosis_block(d: Diagnosis, collapsed: bool = False) -> sec.Block:
    """The diagnosis as one block (the report's HTML page folds it under each run); its verdict
    section is titled "Verdict" (the block says whose diagnosis it is)."""
    counts = ", ".join(f"{n} {v}" for v, n in d.counts().items())
    return sec.Block(
        sec.slug("diagnosis", d.label),
        f"Diagnosis: {d.label}",
        diagnosis_sections(d, title="Verdict"),
        collapsed=collapsed,
        summary=f"{d.verdict} ({counts}); {_cause_finding(d) or d.top_finding()}",
    )


def _cause_finding(d: Diagnosis) -> str:
    found = d.cause_check
    return found.finding if found is not None else ""
