"""The ``curves`` section of the report and compare JSON: per run, the per-step table of every
curve, each curve's correlation and lead-lag with vllm_kl, the steps one side lacks, the events."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mismatchctl.curves.analysis import Link, RunCurves
from mismatchctl.curves.correlate import MIN_LAG_PAIRS
from mismatchctl.curves.series import selection_table
from mismatchctl.stats import registry as M


def run_curves_json(c: RunCurves) -> dict[str, Any]:
    table = selection_table(c.series)
    return {
        "steps": table.column("step").to_pylist(),
        "columns": {
            name: table.column(name).to_pylist() for name in table.column_names if name != "step"
        },
        "origins": {name: s.origin for name, s in c.series.items()},
        "roles": c.roles,
        "dump_steps": len(c.dump_steps),
        "log_steps": len(c.log_steps),
        "only_dump_steps": c.only_dump_steps,
        "only_log_steps": c.only_log_steps,
        "correlations": [
            {
                "metric": link.metric,
                "origin": link.origin,
                "n": link.n,
                "pearson": link.pearson,
                "spearman": link.spearman,
                "lead_lag_of": "step-to-step changes",
                "lead_lag_min_pairs": MIN_LAG_PAIRS,
                "lead_lag": [
                    {"lag": p.lag, "r": p.r, "n": p.n, "ci_low": p.ci_low, "ci_high": p.ci_high}
                    for p in link.lags
                ],
                **_best(link),
                "only_vllm_kl_steps": link.only_kl_steps,
                "only_metric_steps": link.only_metric_steps,
                "nonfinite_steps": link.nonfinite_steps,
            }
            for link in c.links
        ],
        "events": {
            "vllm_kl_spikes": c.kl_spikes,
            "coincident_spikes": [
                {
                    "role": m.role,
                    "metric": m.metric,
                    "steps": [{M.VLLM_KL: x.step_a, "metric": x.step_b} for x in m.matches],
                }
                for m in c.spike_matches
            ],
            "reward_drops": c.reward_drops,
            "reward_drops_not_assessed": c.unassessed_drops,
            "vllm_kl_rise_before_reward_drop": [{**p.__dict__, "lead": p.lead} for p in c.rises],
        },
    }


def _best(link: Link) -> dict[str, Any]:
    best = link.best
    return {
        "best_lag": None if best is None else best.lag,
        "best_lag_r": None if best is None else best.r,
        "best_lag_n": None if best is None else best.n,
        "best_lag_ci_low": None if best is None else best.ci_low,
        "best_lag_ci_high": None if best is None else best.ci_high,
    }
