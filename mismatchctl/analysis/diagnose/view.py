"""A diagnosis as sections: the verdict first (the cause, what it explains, the evidence that
decided it, its runner-up and why it lost, the next step), then one table of checks per layer,
in the order to fix them (each check with its finding, what to try next and its evidence)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mismatchctl.analysis import sections as S
from mismatchctl.analysis.diagnose.check import FAIL, WARN, Check
from mismatchctl.analysis.diagnose.diagnosis import Diagnosis, layers

if TYPE_CHECKING:
    from mismatchctl.analysis.diagnose.checks import cause

LAYER_ORDER_NOTE = (
    "Checks run from data integrity to the objective: fix the first layer that fails before "
    "the ones after it. Evidence of every check: --json or --html."
)


def verdict_facts(d: Diagnosis, title: str | None = None) -> S.Facts:
    """The verdict and the cause that decided it: the first thing a reader sees."""
    counts = ", ".join(f"{n} {v}" for v, n in d.counts().items())
    facts = [S.Fact("verdict", d.verdict, S.Kind.VERDICT, remark=f"({counts})")]
    facts += cause_facts(d.weighing, d.cause_check.finding if d.cause_check else "")
    return S.Facts(S.slug("verdict", d.label), title or f"Diagnosis: {d.label}", facts)


def cause_facts(weighing: cause.Evidence | None, finding: str) -> list[S.Fact]:
    """The named cause, what it explains and why, the second causes, the runner-up, the next
    step (the JSON's ``cause``, in the same order); ``finding``: the cause check's, said when
    no cause is named."""
    head = weighing.named if weighing is not None else None
    if weighing is None or head is None:
        key = weighing.cause if weighing is not None else "none"
        return [S.Fact("cause", finding or key, S.Kind.TEXT)]
    label = head.label + (f": {head.variant}" if head.variant else "")
    out = [S.Fact("cause", label, S.Kind.TEXT)]
    if head.where:
        out.append(S.Fact("where", head.where, S.Kind.TEXT))
    out.append(S.Fact("explains", head.share, S.Kind.SHARE, remark="of the excess"))
    out.append(S.Fact("evidence", head.because, S.Kind.TEXT))
    for also in weighing.also:
        out.append(S.Fact("also", f"{also.label}: {also.because}", S.Kind.TEXT))
    contenders = [r for r in weighing.runner_ups if r.verdict in (WARN, FAIL)]
    if contenders:
        r = contenders[0]
        out.append(S.Fact("runner-up", f"{r.label}: {r.lost or ''}", S.Kind.TEXT))
    if head.next:
        out.append(S.Fact("next", head.next, S.Kind.TEXT))
    if head.correction:
        out.append(S.Fact("correction", head.correction, S.Kind.TEXT))
    return out


def _row(c: Check, label: str) -> S.CheckRow:
    anchor = S.slug("check", label, c.name)
    evidence = c.evidence_dict()  # the section holds the evidence as the JSON writes it
    return S.CheckRow(c.layer, c.verdict, c.name, c.title, c.finding, c.next, evidence, anchor)


def diagnosis_sections(
    d: Diagnosis, brief: bool = False, title: str | None = None
) -> list[S.Section]:
    """The verdict and its cause, then every layer's checks; ``brief`` (``diagnose -q``): the
    verdict, its cause and the checks that fail or warn, failures first, nothing else."""
    out: list[S.Section] = [verdict_facts(d, title)]
    if brief:
        rows = [_row(c, d.label) for v in (FAIL, WARN) for c in d.checks if c.verdict == v]
        if rows:
            out.append(S.Checks(S.slug("failing", d.label), "", rows, brief=True))
        return out
    for layer, checks in layers(d):
        out.append(
            S.Checks(
                S.slug("layer", d.label, layer),
                layer.capitalize(),
                [_row(c, d.label) for c in checks],
            )
        )
    out.append(S.Lines(S.slug("diagnosis-note", d.label), None, [S.Line(LAYER_ORDER_NOTE, "dim")]))
    return out


def diagnosis_block(d: Diagnosis, collapsed: bool = False) -> S.Block:
    """The diagnosis as one block (the report's HTML page folds it under each run); its verdict
    section is titled "Verdict" (the block says whose diagnosis it is)."""
    counts = ", ".join(f"{n} {v}" for v, n in d.counts().items())
    return S.Block(
        S.slug("diagnosis", d.label),
        f"Diagnosis: {d.label}",
        diagnosis_sections(d, title="Verdict"),
        collapsed=collapsed,
        summary=f"{d.verdict} ({counts}); {_cause_finding(d) or d.top_finding()}",
    )


def _cause_finding(d: Diagnosis) -> str:
    found = d.cause_check
    return found.finding if found is not None else ""
