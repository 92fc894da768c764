"""The sections of a `check`: the verdict, each threshold as a check row, and with
``--diagnose`` the checks of diagnose that fail or warn."""

from __future__ import annotations

from mismatchctl.analysis import sections as sec
from mismatchctl.analysis.check.check import FAIL, OK, Gate
from mismatchctl.analysis.diagnose.view import diagnosis_sections


def gate_sections(g: Gate) -> list[sec.Section]:
    failed = len(g.failed_cases)
    remark = f"({len(g.cases) - failed} of {len(g.cases)} thresholds met"
    if g.diagnosis is not None:
        remark += f"; diagnose: {g.diagnosis.verdict}"
    verdict = OK if g.passed else FAIL
    out: list[sec.Section] = [
        sec.Facts(
            sec.slug("check", g.label),
            f"Check: {g.label}",
            [sec.Fact("verdict", verdict, sec.Kind.VERDICT, remark=remark + ")")],
        )
    ]
    rows = [
        sec.CheckRow(
            "thresholds", c.verdict, c.threshold.name, f"{c.threshold.name} ({c.threshold.source})",
            c.message, None, {"value": c.value, "limit": c.threshold.limit},
            sec.slug("threshold", g.label, c.threshold.metric, c.threshold.direction),
        )
        for c in g.cases
    ]  # fmt: skip
    if rows:
        out.append(sec.Checks(sec.slug("thresholds", g.label), "Thresholds", rows))
    if g.diagnosis is not None:
        out += diagnosis_sections(g.diagnosis, brief=True)
    return out
