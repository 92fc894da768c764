"""A diagnosis as sections: the verdict line, then one table of checks per layer, in the order
to fix them (each check with its finding, what to try next and its evidence)."""

from __future__ import annotations

from mismatchctl.analysis import sections as S
from mismatchctl.analysis.diagnose.check import FAIL, WARN
from mismatchctl.analysis.diagnose.diagnosis import Diagnosis, layers

LAYER_ORDER_NOTE = (
    "Checks run from data integrity to the objective: fix the first layer that fails before "
    "the ones after it. Evidence of every check: --json or --html."
)


def verdict_facts(d: Diagnosis) -> S.Facts:
    counts = ", ".join(f"{n} {v}" for v, n in d.counts().items())
    return S.Facts(
        S.slug("verdict", d.label),
        f"Diagnosis: {d.label}",
        [S.Fact("verdict", d.verdict, S.Kind.VERDICT, remark=f"({counts})")],
    )


def _row(c, label: str) -> S.CheckRow:  # a diagnose.check.Check
    anchor = S.slug("check", label, c.name)
    return S.CheckRow(c.layer, c.verdict, c.name, c.title, c.finding, c.next, c.evidence, anchor)


def diagnosis_sections(d: Diagnosis, brief: bool = False) -> list[S.Section]:
    """Every layer's checks; ``brief`` (``diagnose -q``): the verdict and the checks that fail
    or warn, failures first, nothing else."""
    out: list[S.Section] = [verdict_facts(d)]
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
    """The diagnosis as one block (the report's HTML page folds it under each run)."""
    counts = ", ".join(f"{n} {v}" for v, n in d.counts().items())
    return S.Block(
        S.slug("diagnosis", d.label),
        f"Diagnosis: {d.label}",
        diagnosis_sections(d),
        collapsed=collapsed,
        summary=f"{d.verdict} ({counts}); {d.top_finding()}",
    )
