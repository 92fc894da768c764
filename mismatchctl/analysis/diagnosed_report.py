"""A report with a diagnosis of each of its runs (`report --diagnose`, the demo's page): the
report and the diagnoses stay two results, composed here. Its sections are the report's with each
run's verdict in the summary and its diagnosis folded under the run's block; its JSON is the
report's with a ``diagnosis`` section per run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mismatchctl.analysis import sections as sec
from mismatchctl.analysis.diagnose import Diagnosis
from mismatchctl.analysis.diagnose.view import diagnosis_block
from mismatchctl.analysis.report.report import Report
from mismatchctl.analysis.report.view import RunVerdict, report_sections
from mismatchctl.engines.plan import Selection


@dataclass
class DiagnosedReport:
    report: Report
    diagnoses: dict[str, Diagnosis]  # per run of the report, of the same step range

    @property
    def selection(self) -> Selection:
        return self.report.selection

    def verdicts(self) -> dict[str, RunVerdict]:
        """What the report's page shows of each run's diagnosis."""
        return {
            run: RunVerdict(d.verdict, d.top_finding(), diagnosis_block(d, collapsed=True))
            for run, d in self.diagnoses.items()
        }

    def to_dict(self) -> dict[str, Any]:
        """The report's JSON plus ``diagnosis``: each run's, under its selection's label."""
        out = self.report.to_dict()
        if self.diagnoses:
            out["diagnosis"] = {
                d.report.selection.label: d.section_dict() for d in self.diagnoses.values()
            }
        return out

    def to_polars(self) -> Any:
        """The report's groups (``Report.to_polars``); each diagnosis has its own frame."""
        return self.report.to_polars()


def diagnosed_report_sections(d: DiagnosedReport, pool: bool = False) -> list[sec.Section]:
    """The report's sections (``pool``: as the report's) with each run's diagnosis."""
    return report_sections(d.report, pool=pool, verdicts=d.verdicts())
