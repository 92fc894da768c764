"""A diagnosis as JSON: the report shape of METRICS.md plus a ``diagnosis`` section."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from mismatchctl.analysis.diagnose import Diagnosis
from mismatchctl.render.report_json import report_json


def diagnose_json(d: Diagnosis) -> dict[str, Any]:
    out = report_json(d.report)
    out["diagnosis"] = diagnosis_section(d)
    return out


def diagnosis_section(d: Diagnosis) -> dict[str, Any]:
    verdicts = [c.verdict for c in d.checks]
    return {
        "selection": d.report.selection.label,
        "verdict": d.verdict,
        "counts": {v: verdicts.count(v) for v in ("fail", "warn", "ok", "n/a")},
        "checks": [asdict(c) for c in d.checks],
    }
