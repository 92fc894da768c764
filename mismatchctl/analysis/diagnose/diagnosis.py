"""The result of `diagnose`: the report it read and every check's result, in the order the
diagnosis lists them (``registry.LISTED``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from mismatchctl.analysis.diagnose.check import FAIL, LAYERS, NA, OK, WARN, Check, worst
from mismatchctl.analysis.report import Report


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

    def sections(self, brief: bool = False) -> list[Any]:
        """The diagnosis as sections; ``brief``: the verdict and what fails or warns only."""
        from mismatchctl.analysis.diagnose.view import diagnosis_sections

        return diagnosis_sections(self, brief)

    def to_dict(self) -> dict[str, Any]:
        """The report's JSON plus a ``diagnosis`` section."""
        return {**self.report.to_dict(), "diagnosis": self.section_dict()}

    def section_dict(self) -> dict[str, Any]:
        return {
            "selection": self.report.selection.label,
            "baseline": self.baseline,
            "verdict": self.verdict,
            "counts": self.counts(),
            "checks": [asdict(c) for c in self.checks],
        }

    def to_polars(self) -> Any:
        """One row per check: layer, name, title, verdict, finding, next."""
        import polars as pl

        keys = ("layer", "name", "title", "verdict", "finding", "next")
        return pl.DataFrame([{k: getattr(c, k) for k in keys} for c in self.checks])


def layers(d: Diagnosis) -> list[tuple[str, list[Check]]]:
    """The checks grouped by layer, in layer order."""
    return [(name, d.layer(name)) for name in LAYERS if d.layer(name)]
