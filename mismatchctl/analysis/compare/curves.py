"""Compare the training curves of two sides: each metric of both sides aligned on step.

Curves are paired by name (vllm_kl and the other dump-derived curves always pair), and role
curves (reward, grad norm, entropy) also pair when the two sides' logs name them differently.
For every pair: the steps both sides have and those only one has, the means over the common steps,
and each side's correlation with its own per-step vllm_kl.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mismatchctl.analysis.report.report import Report
from mismatchctl.curves.analysis import RunCurves
from mismatchctl.curves.series import KL, Series


@dataclass
class Trace:
    """One side's curve: ``label`` names the side (and the run when the side has several)."""

    label: str
    series: Series
    pearson: float | None  # with the side's per-step vllm_kl (None for vllm_kl itself)


@dataclass
class CurvePair:
    metric: str  # the name, or "role (name A | name B)" when paired by role
    a: Trace | None
    b: Trace | None
    common_steps: int = 0
    only_a_steps: list[int] = field(default_factory=list)
    only_b_steps: list[int] = field(default_factory=list)
    mean_a: float | None = None  # over the common steps with finite values on both sides
    mean_b: float | None = None

    @property
    def ratio(self) -> float | None:
        """``mean_b / mean_a`` over the common steps (None when undefined)."""
        if self.mean_a in (None, 0) or self.mean_b is None:
            return None
        return self.mean_b / self.mean_a


def pair_dict(p: CurvePair) -> dict[str, Any]:
    """A paired curve of a comparison as its JSON (``comparison.curves``)."""
    return {
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


def side_curves(report: Report, label: str) -> list[tuple[str, RunCurves]]:
    runs = list(report.curves.values())
    if len(runs) == 1:
        return [(label, runs[0])]
    return [(f"{label} · {c.run}", c) for c in runs]


def compare_curves(ra: Report, rb: Report, label_a: str, label_b: str) -> list[CurvePair]:
    """Pairs for the first run with curves of each side (a side of several runs is compared on
    its first run; the note in the comparison says so)."""
    sa, sb = side_curves(ra, label_a), side_curves(rb, label_b)
    if not sa or not sb:
        return []
    (la, ca), (lb, cb) = sa[0], sb[0]
    pairs: list[CurvePair] = []
    names = [KL, *[n for n in ca.series if n != KL]]
    names += [n for n in cb.series if n not in names]
    for name in names:
        pairs.append(_pair(name, _trace(la, ca, name), _trace(lb, cb, name)))
    for role in ("reward", "grad_norm", "entropy"):
        na, nb = ca.roles.get(role), cb.roles.get(role)
        if na and nb and na != nb:
            label = f"{role} ({na} | {nb})"
            pairs.insert(1, _pair(label, _trace(la, ca, na), _trace(lb, cb, nb)))
    return pairs


def _trace(label: str, c: RunCurves, name: str) -> Trace | None:
    if name not in c.series:
        return None
    link = next((x for x in c.links if x.metric == name), None)
    return Trace(label, c.series[name], None if link is None else link.pearson)


def _pair(metric: str, a: Trace | None, b: Trace | None) -> CurvePair:
    pair = CurvePair(metric, a, b)
    if a is None or b is None:
        return pair
    sa, sb = a.series, b.series
    common, ia, ib = np.intersect1d(sa.steps, sb.steps, assume_unique=True, return_indices=True)
    pair.common_steps = len(common)
    pair.only_a_steps = [int(s) for s in np.setdiff1d(sa.steps, sb.steps, assume_unique=True)]
    pair.only_b_steps = [int(s) for s in np.setdiff1d(sb.steps, sa.steps, assume_unique=True)]
    va, vb = sa.values[ia], sb.values[ib]
    ok = np.isfinite(va) & np.isfinite(vb)
    if ok.any():
        pair.mean_a, pair.mean_b = float(va[ok].mean()), float(vb[ok].mean())
    return pair
