"""The result of `diagnose`: the report it read and every check's result, in the order the
diagnosis lists them (``registry.LISTED``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mismatchctl.analysis.diagnose.check import FAIL, LAYERS, NA, OK, WARN, Check, worst
from mismatchctl.analysis.report.report import Report

if TYPE_CHECKING:
    from mismatchctl.analysis.diagnose.checks import cause


@dataclass
class Diagnosis:
    report: Report
    checks: list[Check]
    baseline: str | None = None  # the --baseline selector, if any

    @property
    def verdict(self) -> str:
        return worst([c.verdict for c in self.checks])

    @property
    def failed(self) -> bool:
        return any(c.verdict == FAIL for c in self.checks)

    def layer(self, name: str) -> list[Check]:
        return [c for c in self.checks if c.layer == name]

    @property
    def label(self) -> str:
        sel = self.report.selection
        return sel.label or ", ".join(sel.names)

    def counts(self) -> dict[str, int]:
        verdicts = [c.verdict for c in self.checks]
        return {v: verdicts.count(v) for v in (FAIL, WARN, OK, NA)}

    def top_finding(self) -> str:
        """The first failing check's finding, else the first warning's, else "no problem"."""
        for verdict in (FAIL, WARN):
            for c in self.checks:
                if c.verdict == verdict:
                    return f"{c.name}: {c.finding}"
        return "no check fails or warns"

    def to_dict(self) -> dict[str, Any]:
        """The report's JSON plus a ``diagnosis`` section."""
        return {**self.report.to_dict(), "diagnosis": self.section_dict()}

    @property
    def cause_check(self) -> Check | None:
        """The cause check's result (None: a diagnosis without one)."""
        from mismatchctl.analysis.diagnose.checks import cause

        return next((c for c in self.checks if c.name == cause.NAME), None)

    @property
    def weighing(self) -> cause.Evidence | None:
        """The weighing of the causes (the cause check's evidence: the named cause, the second
        causes, the runner-ups); None when there is no cause check."""
        from mismatchctl.analysis.diagnose.check import evidence_of
        from mismatchctl.analysis.diagnose.checks import cause

        return evidence_of(self.cause_check, cause.Evidence)

    @property
    def cause(self) -> dict[str, Any]:
        """The JSON's ``cause``: the weighing and the cause check's finding; ``{"key":
        "none"}`` when there is no cause check."""
        found = self.cause_check
        if found is None:
            return {"key": "none"}
        return {**found.evidence_dict(), "finding": found.finding}

    def section_dict(self) -> dict[str, Any]:
        """The JSON's ``diagnosis``: the verdict, then the cause that decided it, then every
        check (the order the terminal and the HTML page show them in)."""
        return {
            "selection": self.report.selection.label,
            "baseline": self.baseline,
            "verdict": self.verdict,
            "cause": self.cause,
            "counts": self.counts(),
            "checks": [c.to_dict() for c in self.checks],
        }

    def to_polars(self) -> Any:
        """One row per check: layer, name, title, verdict, finding, next."""
        import polars as pl

        keys = ("layer", "name", "title", "verdict", "finding", "next")
        return pl.DataFrame([{k: getattr(c, k) for k in keys} for c in self.checks])


def layers(d: Diagnosis) -> list[tuple[str, list[Check]]]:
    """The checks grouped by layer, in layer order."""
    return [(name, d.layer(name)) for name in LAYERS if d.layer(name)]
