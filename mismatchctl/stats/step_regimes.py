"""How one run's mismatch moves over its steps, from its K3 cube: each step's rate at its own
token mix, a split of the steps into a healthy and an elevated group (regimes, isolated spikes),
and the trend, all with sequence-clustered intervals.

A step's *rate ratio* is its K3 mass over what the run's per-bin rates predict at the step's
token mix (``E_s = sum_b n(s, b) k(b)``): a step that samples more low-probability tokens is not
called hotter for it. Steps hold disjoint sequences, so their log ratios are independent up to
the shared ``k(b)``; the variance of each is the sandwich variance of its mass
(``localize.math.sandwich_var``) over the mass squared.

The split sorts the steps by rate ratio and tests every cut (the top ``k`` steps against the
others, ``k = 1 .. S - 1``) with the localization's contrast of a region against the rest of
the run at the same token probabilities (``localize.findings.estimate``: exact covariance, steps
being a sequence dimension); the cut with the largest z is the split. Whether the steps differ
at all is Cochran's homogeneity test of their log ratios: a split is only reported by the
checks when that rejects (the thresholds live in ``analysis/diagnose/steps.py``).

The trend is the random-effects weighted least-squares line of the steps' log ratios on the step
number (DerSimonian-Laird between-step variance for a meta-regression): its fitted rise from the
first to the last step and the interval of that rise.

Steps beyond the cube's ``block_cap`` are seen in blocks of consecutive steps (``stats/cube/spec.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mismatchctl.stats.cube.cube import Cube
from mismatchctl.stats.localize.findings import Sides, estimate
from mismatchctl.stats.localize.math import chi2_sf, div, norm_ppf, relvar
from mismatchctl.stats.localize.tables import SideTables
from mismatchctl.stats.localize.thresholds import LocalizeThresholds

LEVEL = 0.95  # of every interval here


@dataclass
class StepRates:
    """Per step (or block of steps): its label, its number (the first step of a block), tokens,
    sequences, rate ratio to the run's per-bin rates and the variance of its log."""

    labels: list[str]
    numbers: np.ndarray
    tokens: np.ndarray
    sequences: np.ndarray
    ratio: np.ndarray
    log_var: np.ndarray
    codes: np.ndarray  # search-level codes of the cube's step dimension

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class StepSplit:
    """The steps in two groups: ``elevated`` (indices into the StepRates) at ``ratio`` times the
    others' rate at the same token mix, with its interval (Bonferroni over the cuts tried),
    the cut's z, and Cochran's test of the steps' homogeneity."""

    elevated: list[int]
    ratio: float
    ci: tuple[float, float]
    z: float
    cuts: int
    q: float
    p_value: float
    spread: float  # DerSimonian-Laird between-step factor, exp(tau)
    elevated_level: float  # mean K3 of the elevated steps
    rest_level: float  # mean K3 of the other steps


@dataclass
class StepTrend:
    """The fitted rise of the steps' rate ratio from the first to the last step (a factor), its
    interval, the between-step spread and the steps fitted."""

    rise: float
    ci: tuple[float, float]
    start: float  # fitted mean K3 at the first step
    end: float  # ... and at the last
    spread: float
    steps: int
    q_line: float = math.nan  # weighted residual sum of squares of the steps around the line
    q_change: float = math.nan  # ... and around the best change point (two levels)

    @property
    def smooth(self) -> bool:
        """The steps follow the line at least as closely as any change point: a growth, not a
        step change (both models have two parameters; the change point also picks its step)."""
        return self.q_line <= self.q_change


def step_rates(
    cube: Cube, dim: str = "step", stratum: str | None = "bin", tables: SideTables | None = None
) -> StepRates:
    """Every step with tokens: its rate ratio and the variance of the log (module docstring).
    ``tables``: the cube's, when the caller has them (a run's view reads them four times)."""
    t = SideTables(cube) if tables is None else tables
    d = cube.spec.index(dim)
    n1, a1 = t.n[(d,)], t.a[(d,)]
    if stratum is None:
        expected = n1 * div(t.total_a, t.total_n)
    else:
        s = cube.spec.index(stratum)
        k = div(t.a[(s,)], t.n[(s,)])
        key = tuple(sorted((d, s)))
        table = t.n[key] if key == (d, s) else t.n[key].T
        expected = table @ k
    keep = np.flatnonzero(n1 > 0)
    spec = cube.spec
    labels = [spec.level_label(d, [int(c)]) for c in keep]
    numbers = np.array(
        [_number(spec.dims[d].labels[int(spec.members(d, int(c))[0])]) for c in keep]
    )
    return StepRates(
        labels,
        numbers,
        n1[keep],
        t.g[(d,)][keep],
        div(a1[keep], expected[keep], np.nan),
        relvar(t.v[(d,)][keep], a1[keep]),
        keep,
    )


def _number(label: str) -> float:
    try:
        return float(label)
    except ValueError:
        return math.nan


def homogeneity(rates: StepRates) -> tuple[float, float, float]:
    """Cochran's Q of the steps' log ratios, its p-value and the between-step factor exp(tau)
    (steps without a finite positive ratio are left out)."""
    ok = _usable(rates)
    x, v = np.log(rates.ratio[ok]), rates.log_var[ok]
    if len(x) < 2:
        return 0.0, 1.0, 1.0
    w = 1.0 / v
    pooled = float(np.sum(w * x) / np.sum(w))
    q = float(np.sum(w * (x - pooled) ** 2))
    denom = float(np.sum(w) - np.sum(w * w) / np.sum(w))
    tau2 = max(0.0, (q - (len(x) - 1)) / denom) if denom > 0 else 0.0
    return q, chi2_sf(q, len(x) - 1), math.exp(math.sqrt(tau2))


def _usable(rates: StepRates) -> np.ndarray:
    return (
        np.isfinite(rates.ratio)
        & (rates.ratio > 0)
        & np.isfinite(rates.log_var)
        & (rates.log_var > 0)
    )


def split_steps(
    cube: Cube, rates: StepRates, dim: str = "step", tables: SideTables | None = None
) -> StepSplit | None:
    """The best cut of the steps sorted by rate ratio (module docstring); None with fewer than
    two usable steps. ``tables``: the cube's (:func:`step_rates`)."""
    ok = np.flatnonzero(_usable(rates))
    if len(ok) < 2:
        return None
    t = SideTables(cube) if tables is None else tables
    s = cube.spec.index("bin") if "bin" in {x.name for x in cube.spec.dims} else None
    sides = Sides(t, None, s, frozenset(), None, LocalizeThresholds())
    d = cube.spec.index(dim)
    order = ok[np.argsort(-rates.ratio[ok], kind="stable")]
    best: tuple[float, int, float, float] | None = None
    for k in range(1, len(order)):
        mask = np.zeros(cube.spec.levels(d), bool)
        mask[rates.codes[order[:k]]] = True
        est, var = estimate(sides, {d: mask})
        ratio = float(est.rate_ratio)
        if not (ratio > 0 and math.isfinite(ratio) and var > 0 and math.isfinite(var)):
            continue
        z = math.log(ratio) / math.sqrt(var)
        if best is None or z > best[0]:
            best = (z, k, ratio, var)
    if best is None:
        return None
    z, k, ratio, var = best
    cuts = len(order) - 1
    half = norm_ppf(1 - (1 - LEVEL) / (2 * cuts)) * math.sqrt(var)
    q, p, spread = homogeneity(rates)
    elevated = sorted(int(i) for i in order[:k])
    rest = [int(i) for i in order[k:]]
    return StepSplit(
        elevated=elevated,
        ratio=ratio,
        ci=(ratio * math.exp(-half), ratio * math.exp(half)),
        z=z,
        cuts=cuts,
        q=q,
        p_value=p,
        spread=spread,
        elevated_level=_level(t, d, rates, elevated),
        rest_level=_level(t, d, rates, rest),
    )


def _level(t: SideTables, d: int, rates: StepRates, which: list[int]) -> float:
    codes = rates.codes[which]
    return float(div(t.a[(d,)][codes].sum(), t.n[(d,)][codes].sum(), math.nan))


def trend(cube: Cube, rates: StepRates, tables: SideTables | None = None) -> StepTrend | None:
    """The random-effects line of log ratio on step number; None with fewer than three usable
    steps (or steps without numbers). ``tables``: the cube's (:func:`step_rates`)."""
    ok = _usable(rates) & np.isfinite(rates.numbers)
    x, y, v = rates.numbers[ok], np.log(rates.ratio[ok]), rates.log_var[ok]
    if len(x) < 3 or np.ptp(x) == 0:
        return None
    tau2 = _meta_tau2(x, y, v)
    w = 1.0 / (v + tau2)
    design = np.column_stack([np.ones_like(x), x])
    cov = np.linalg.inv(design.T @ (design * w[:, None]))
    beta = cov @ (design.T @ (w * y))
    span = float(x.max() - x.min())
    rise, se = float(beta[1]) * span, math.sqrt(float(cov[1, 1])) * span
    half = norm_ppf(1 - (1 - LEVEL) / 2) * se
    t = SideTables(cube) if tables is None else tables
    base = float(div(t.total_a, t.total_n, math.nan))
    q_line, q_change = _shapes(x, y, v)
    return StepTrend(
        rise=math.exp(rise),
        ci=(math.exp(rise - half), math.exp(rise + half)),
        start=base * math.exp(float(beta[0] + beta[1] * x.min())),
        end=base * math.exp(float(beta[0] + beta[1] * x.max())),
        spread=math.exp(math.sqrt(tau2)),
        steps=len(x),
        q_line=q_line,
        q_change=q_change,
    )


def _shapes(x: np.ndarray, y: np.ndarray, v: np.ndarray) -> tuple[float, float]:
    """Weighted (``1 / v``) residual sums of squares of the log ratios ``y`` at step numbers
    ``x`` around the least-squares line, and around the best change point: the steps before one
    step at one level, the rest at another."""
    order = np.argsort(x, kind="stable")
    x, y, w = x[order], y[order], 1.0 / v[order]
    design = np.column_stack([np.ones_like(x), x])
    beta = np.linalg.solve(design.T @ (design * w[:, None]), design.T @ (w * y))
    q_line = float(np.sum(w * (y - design @ beta) ** 2))
    sw, swy, swyy = np.cumsum(w), np.cumsum(w * y), np.cumsum(w * y * y)
    head = swyy[:-1] - swy[:-1] ** 2 / sw[:-1]  # steps before each cut
    tw, twy, twyy = sw[-1] - sw[:-1], swy[-1] - swy[:-1], swyy[-1] - swyy[:-1]
    tail = twyy - twy**2 / tw
    return q_line, float(np.min(head + tail))


def _meta_tau2(x: np.ndarray, y: np.ndarray, v: np.ndarray) -> float:
    """DerSimonian-Laird between-step variance around a weighted line (meta-regression, two
    parameters): ``(Q - (k - 2)) / (tr W - tr(W X (X'WX)^-1 X'W))``, at least 0."""
    w = 1.0 / v
    design = np.column_stack([np.ones_like(x), x])
    xtwx = design.T @ (design * w[:, None])
    beta = np.linalg.solve(xtwx, design.T @ (w * y))
    q = float(np.sum(w * (y - design @ beta) ** 2))
    hat = (design * w[:, None]) @ np.linalg.solve(xtwx, (design * w[:, None]).T)
    denom = float(np.sum(w) - np.trace(hat))
    return max(0.0, (q - (len(x) - 2)) / denom) if denom > 0 else 0.0


__all__ = [
    "StepRates",
    "StepSplit",
    "StepTrend",
    "homogeneity",
    "split_steps",
    "step_rates",
    "trend",
]
