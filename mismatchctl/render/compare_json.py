"""A comparison as JSON: the METRICS.md shape with a ``side`` key in each group's ``by``, and a
``comparison`` section."""

from __future__ import annotations

from typing import Any

from mismatchctl.analysis.compare import Comparison
from mismatchctl.render.report_json import report_json


def comparison_json(c: Comparison) -> dict[str, Any]:
    sides = {"a": report_json(c.a), "b": report_json(c.b)}
    out = {k: sides["a"][k] for k in ("schema_version", "tool", "aggregation", "bin_edges")}
    out["runs"] = {**sides["a"]["runs"], **sides["b"]["runs"]}
    out["excluded"] = {side: doc["excluded"] for side, doc in sides.items()}
    out["groups"] = [
        {**g, "by": {"side": side, **g["by"]}} for side, doc in sides.items() for g in doc["groups"]
    ]
    out["comparison"] = {
        "a": c.a.selection.label,
        "b": c.b.selection.label,
        "config_diff": c.config,
        "headline": c.headline,
        "gap": c.gap,
        "bins": c.bins,
        "turn_kind": c.turn_kinds,
        "gpu": c.gpus,
        "steps": c.steps,
        "hardware": {side: doc.get("hardware") for side, doc in sides.items()},
        "notes": c.notes,
        "curves": [
            {
                "metric": p.metric,
                "a": None if p.a is None else p.a.series.name,
                "b": None if p.b is None else p.b.series.name,
                "common_steps": p.common_steps,
                "only_a_steps": p.only_a_steps,
                "only_b_steps": p.only_b_steps,
                "mean_a": p.mean_a,
                "mean_b": p.mean_b,
                "ratio": p.ratio,
                "pearson_with_vllm_kl_a": None if p.a is None else p.a.pearson,
                "pearson_with_vllm_kl_b": None if p.b is None else p.b.pearson,
            }
            for p in c.curves
        ],
    }
    out["curves"] = {side: doc.get("curves", {}) for side, doc in sides.items()}
    return out
