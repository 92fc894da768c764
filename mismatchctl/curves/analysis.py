"""The training-curve view of a run: its per-step curves joined to per-step vllm_kl.

For every curve other than vllm_kl: Pearson and Spearman correlation with vllm_kl over the steps
both have, the lead-lag cross-correlation at lags -5..5 of their step-to-step changes (with n and
a 95% interval; none below ``correlate.MIN_LAG_PAIRS`` pairs), and the steps only one of them has. The
events the studies describe are looked for by role: vllm_kl spikes that coincide with spikes of the
gradient norm, the entropy or the trainer perplexity, and vllm_kl rises that precede a reward drop.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mismatchctl.curves import correlate, events
from mismatchctl.curves.correlate import MIN_LAG_PAIRS
from mismatchctl.curves.series import ENTROPY_MEAN, KL, REWARD_MEAN, Series, selection_table
from mismatchctl.engines.sequences import RunSequences
from mismatchctl.stats import registry as M

# Roles of training-log metrics, found by name (the last path component, then the whole name);
# the first pattern that matches any metric wins, and among its matches the shortest name.
ROLE_PATTERNS: dict[str, tuple[str, ...]] = {
    "grad_norm": ("grad_norm", "grad-norm", "gradnorm", "grad_norm*", "*grad_norm*"),
    "entropy": ("entropy", M.ENTROPY_MEAN, "entropy*", "*entropy*"),
    "reward": ("reward", M.REWARD_MEAN, "score", "rewards", "raw_reward", "*reward*", "*score*"),
}
# Dump-derived curves that stand in for a role when the training log has none.
DUMP_ROLES = {"reward": REWARD_MEAN, "entropy": ENTROPY_MEAN, M.TRAINER_PPL: M.TRAINER_PPL}
# Spikes of these roles are looked for on a log scale (multiplicative quantities).
LOG_ROLES = {"grad_norm", M.TRAINER_PPL}


@dataclass
class Link:
    """One curve against per-step vllm_kl."""

    metric: str
    origin: str
    n: int
    pearson: float | None
    spearman: float | None
    lags: list[correlate.LagPoint]
    best: correlate.LagPoint | None
    only_kl_steps: list[int]
    only_metric_steps: list[int]
    nonfinite_steps: list[int]


@dataclass
class SpikeMatch:
    role: str
    metric: str
    kl_spikes: int
    matches: list[events.Coincidence]  # step_a: vllm_kl spike, step_b: the metric's spike


@dataclass
class RunCurves:
    run: str
    series: dict[str, Series]
    links: list[Link]
    roles: dict[str, str]  # role -> the curve that plays it
    dump_steps: list[int]
    log_steps: list[int]
    only_dump_steps: list[int]  # steps with dump data but no training-log value at all
    only_log_steps: list[int]  # steps in the training logs with no dump data
    kl_spikes: list[int]
    spike_matches: list[SpikeMatch] = field(default_factory=list)
    reward_drops: list[events.Drop] = field(default_factory=list)
    rises: list[events.Precedence] = field(default_factory=list)
    unassessed_drops: list[int] = field(default_factory=list)  # too few vllm_kl steps before

    @property
    def has_logs(self) -> bool:
        return any(not s.from_dumps for s in self.series.values())

    def to_dict(self) -> dict[str, Any]:
        """The run's entry of the JSON ``curves`` section of the report and compare JSON
        (docs/curves.md): the per-step table of every curve, each curve's correlation and
        lead-lag with vllm_kl, the steps one side lacks, the events."""
        table = selection_table(self.series)
        return {
            "steps": table.column("step").to_pylist(),
            "columns": {
                name: table.column(name).to_pylist()
                for name in table.column_names
                if name != "step"
            },
            "origins": {name: s.origin for name, s in self.series.items()},
            "roles": self.roles,
            "dump_steps": len(self.dump_steps),
            "log_steps": len(self.log_steps),
            "only_dump_steps": self.only_dump_steps,
            "only_log_steps": self.only_log_steps,
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
                for link in self.links
            ],
            "events": {
                "vllm_kl_spikes": self.kl_spikes,
                "coincident_spikes": [
                    {
                        "role": m.role,
                        "metric": m.metric,
                        "steps": [{M.VLLM_KL: x.step_a, "metric": x.step_b} for x in m.matches],
                    }
                    for m in self.spike_matches
                ],
                "reward_drops": self.reward_drops,
                "reward_drops_not_assessed": self.unassessed_drops,
                "vllm_kl_rise_before_reward_drop": [
                    {**p.__dict__, "lead": p.lead} for p in self.rises
                ],
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


def find_roles(series: dict[str, Series]) -> dict[str, str]:
    """Which curve is the gradient norm, the entropy and the reward: a training-log metric by
    name (ROLE_PATTERNS), else the dump-derived mean (reward, entropy)."""
    logs = [name for name, s in series.items() if not s.from_dumps]
    roles: dict[str, str] = {}
    for role, patterns in ROLE_PATTERNS.items():
        for pattern in patterns:
            hits = [n for n in logs if _matches(n, pattern)]
            if hits:
                roles[role] = min(hits, key=lambda n: (len(n), n))
                break
    for role, name in DUMP_ROLES.items():
        if role not in roles and name in series and np.isfinite(series[name].values).any():
            roles[role] = name
    return roles


def _matches(name: str, pattern: str) -> bool:
    low = name.lower()
    return fnmatch.fnmatchcase(low.rsplit("/", 1)[-1], pattern) or fnmatch.fnmatchcase(low, pattern)


def run_curves(run: str, series: dict[str, Series]) -> RunCurves:
    kl = series[KL]
    dump_steps = sorted({int(s) for c in series.values() if c.from_dumps for s in c.steps})
    log_steps = sorted({int(s) for c in series.values() if not c.from_dumps for s in c.steps})
    links = [_link(kl, s) for name, s in series.items() if name != KL]
    roles = find_roles(series)
    curves = RunCurves(
        run=run,
        series=series,
        links=links,
        roles=roles,
        dump_steps=dump_steps,
        log_steps=log_steps,
        only_dump_steps=sorted(set(dump_steps) - set(log_steps)) if log_steps else [],
        only_log_steps=sorted(set(log_steps) - set(dump_steps)),
        kl_spikes=events.spikes(kl.steps, kl.values, log=True),
    )
    for role in ("grad_norm", "entropy", M.TRAINER_PPL):
        if role in roles:
            curves.spike_matches.append(_spike_match(kl, series[roles[role]], role, curves))
    if "reward" in roles:
        reward = series[roles["reward"]]
        steps, k, r = correlate.outer_join(kl.steps, kl.values, reward.steps, reward.values)
        curves.reward_drops = events.reward_drops(reward.steps, reward.values)
        curves.rises = events.rise_before_drop(steps, k, r)
        curves.unassessed_drops = [
            d.step
            for d in curves.reward_drops
            if not events.rise_assessable(kl.steps, kl.values, d.step)
        ]
    return curves


def _link(kl: Series, other: Series) -> Link:
    a = correlate.align(kl.steps, kl.values, other.steps, other.values)
    lags = correlate.change_lead_lag(a.steps, a.x, a.y)
    return Link(
        metric=other.name,
        origin=other.origin,
        n=a.n,
        pearson=correlate.pearson(a.x, a.y),
        spearman=correlate.spearman(a.x, a.y),
        lags=lags,
        best=correlate.best_lag(lags),
        only_kl_steps=a.only_x_steps,
        only_metric_steps=a.only_y_steps,
        nonfinite_steps=a.nonfinite_steps,
    )


def _spike_match(kl: Series, other: Series, role: str, curves: RunCurves) -> SpikeMatch:
    steps, k, m = correlate.outer_join(kl.steps, kl.values, other.steps, other.values)
    matches = events.coincident_spikes(steps, k, m, log_a=True, log_b=role in LOG_ROLES)
    return SpikeMatch(role, other.name, len(curves.kl_spikes), matches)


def selection_curves(
    selection, step_groups: list, sequences: dict[str, RunSequences]
) -> dict[str, RunCurves]:
    """Per run of the selection: its dump-derived curves (from the report's per-(run, step)
    groups and ``sequences``, what its sequence rows hold) joined to its training-log curves."""
    from mismatchctl.curves.series import dump_series, log_series

    out = {}
    for run in selection.names:
        found = sequences.get(run)
        series = dump_series(run, step_groups, found.means if found is not None else {})
        if not len(series[KL].steps):
            continue
        if selection.store is not None:
            series.update(log_series(selection.store, run, selection.rows))
        out[run] = run_curves(run, series)
    return out
