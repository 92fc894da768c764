"""A diagnosis as sections: the verdict line, then one table of checks per layer, in the order
to fix them (each check with its finding, what to try next and its evidence)."""

from __future__ import annotations

from mismatchctl.analysis.diagnose import Diagnosis, layers
from mismatchctl.analysis.diagnose_base import FAIL, WARN
from mismatchctl.analysis.sections import (
    Block,
    CheckRow,
    Checks,
    Fact,
    Facts,
    Kind,
    Line,
    Lines,
    Section,
    slug,
)

LAYER_ORDER_NOTE = (
    "Checks run from data integrity to the objective: fix the first layer that fails before "
    "the ones after it. Evidence of every check: --json or --html."
)


def verdict_facts(d: Diagnosis) -> Facts:
    counts = ", ".join(f"{n} {v}" for v, n in d.counts().items())
    return Facts(
        slug("verdict", d.label),
        f"Diagnosis: {d.label}",
        [Fact("verdict", d.verdict, Kind.VERDICT, remark=f"({counts})")],
    )


def _row(c, label: str) -> CheckRow:  # a diagnose_base.Check
    anchor = slug("check", label, c.name)
    return CheckRow(c.layer, c.verdict, c.name, c.title, c.finding, c.next, c.evidence, anchor)


def diagnosis_sections(d: Diagnosis, brief: bool = False) -> list[Section]:
    """Every layer's checks; ``brief`` (``diagnose -q``): the verdict and the checks that fail
    or warn, failures first, nothing else."""
    out: list[Section] = [verdict_facts(d)]
    if brief:
        rows = [_row(c, d.label) for v in (FAIL, WARN) for c in d.checks if c.verdict == v]
        if rows:
            out.append(Checks(slug("failing", d.label), "", rows, brief=True))
        return out
    for layer, checks in layers(d):
        out.append(
            Checks(
                slug("layer", d.label, layer),
                layer.capitalize(),
                [_row(c, d.label) for c in checks],
            )
        )
    out.append(Lines(slug("diagnosis-note", d.label), None, [Line(LAYER_ORDER_NOTE, "dim")]))
    return out


def diagnosis_block(d: Diagnosis, collapsed: bool = False) -> Block:
    """The diagnosis as one block (the report's HTML page folds it under each run)."""
    counts = ", ".join(f"{n} {v}" for v, n in d.counts().items())
    return Block(
        slug("diagnosis", d.label),
        f"Diagnosis: {d.label}",
        diagnosis_sections(d),
        collapsed=collapsed,
        summary=f"{d.verdict} ({counts}); {d.top_finding()}",
    )
