"""The report as plain JSON, in the shape of METRICS.md ("JSON shape")."""

from __future__ import annotations

from typing import Any

from mismatchctl import __version__
from mismatchctl.analysis.report import Report
from mismatchctl.engines import plan as K
from mismatchctl.render.curves_json import curves_json
from mismatchctl.stats import registry as M

# The version of this JSON shape (METRICS.md "JSON shape"), not of the store: additions such as
# the ``curves`` section keep it; renaming or removing a key raises it.
REPORT_SCHEMA_VERSION = 1


def report_json(report: Report) -> dict[str, Any]:
    run_groups = {g.by[K.RUN]: g.metrics for g in report.split(K.RUN)}
    steps: dict[str, list[int]] = {}
    for g in report.split(K.RUN, K.STEP):
        steps.setdefault(g.by[K.RUN], []).append(g.by[K.STEP])
    out: dict[str, Any] = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "tool": f"mismatchctl {__version__}",
        "aggregation": report.aggregation,
        "bin_edges": [float(e) for e in report.bin_edges],
        "runs": {
            r.name: {
                "tags": r.tags,
                M.TOKENS: run_groups.get(r.name, {}).get(M.TOKENS, 0),
                M.SEQUENCES: run_groups.get(r.name, {}).get(M.SEQUENCES, 0),
                "steps": steps.get(r.name, []),
            }
            for r in report.selection.runs
        },
        "excluded": report.excluded,
        "groups": [_group(g) for split in report.splits for g in report.groups[split]],
    }
    if report.selection.steps is not None:
        out["step_range"] = str(report.selection.steps)
    if report.hardware is not None:
        out["hardware"] = report.hardware
    if report.curves:
        out["curves"] = curves_json(report.curves)
    return out


def _group(g) -> dict[str, Any]:
    item: dict[str, Any] = {"by": g.by, "metrics": g.metrics}
    if g.band is not None:
        item["band"] = g.band
    return item
