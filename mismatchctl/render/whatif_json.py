"""A what-if as JSON: the report shape of METRICS.md plus a ``whatif`` section."""

from __future__ import annotations

from typing import Any

from mismatchctl.analysis.whatif import Whatif
from mismatchctl.render.report_json import report_json
from mismatchctl.stats import registry as M
from mismatchctl.stats.whatif import Method


def method_json(m: Method) -> dict[str, Any]:
    t = m.threshold
    return {
        "method": m.name,
        "threshold": list(t) if isinstance(t, tuple) else t,
        "unit": m.info.unit,
        "action": m.info.action,
        "definition": m.info.describes,
    }


def whatif_json(w: Whatif) -> dict[str, Any]:
    out = report_json(w.report)
    groups = []
    for items in w.groups.values():
        for g in items:
            for m, metrics in zip(w.methods, g.results, strict=True):
                groups.append({"by": g.by, **method_json(m), "metrics": metrics})
    out["whatif"] = {
        "selection": w.report.selection.label,
        "sweep": w.sweep,
        "methods": [method_json(m) for m in w.methods],
        "groups": groups,
        "batches": [
            {"run": run, "step": step, M.VLLM_KL: float(kl)}
            for (run, step), kl in sorted(w.batch_vllm_kl.items())
        ],
    }
    return out
