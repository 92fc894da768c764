"""Checks of the trajectory layer: how each run's per-batch vllm_kl moves over the steps, and
whether stale weights carry more of it. Per-run results are combined: the worst run decides."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mismatchctl.analysis import diagnose_thresholds as T
from mismatchctl.analysis.diagnose_base import (
    MAX_LISTED,
    NA,
    TRAJECTORY,
    Check,
    Context,
    StepSeries,
    advice_if,
    fmt,
    grade,
    pct,
    worst,
)
from mismatchctl.analysis.diagnose_extra import LagSums
from mismatchctl.stats import registry as M
from mismatchctl.stats.robust import robust_z, spearman, theil_sen

RunResult = tuple[str, str, dict[str, Any]]  # verdict, finding, evidence
PerRun = Callable[[StepSeries], RunResult]


def _per_run(ctx: Context, name: str, title: str, fn: PerRun, advice: str, need: int) -> Check:
    results = {run: fn(s) for run, s in ctx.series.items() if len(s.steps) >= need}
    if not results:
        return Check(
            TRAJECTORY, name, title, NA,
            f"no run has the {need} steps needed", {"min_steps": need},
        )  # fmt: skip
    verdict = worst([v for v, _, _ in results.values()])
    shown = [run for run, (v, _, _) in results.items() if v == verdict]
    finding = "; ".join(f"{run}: {results[run][1]}" for run in shown[:3])
    if len(shown) > 3:
        finding += f"; and {len(shown) - 3} more run(s)"
    evidence = {"runs": {run: e for run, (_, _, e) in results.items()}}
    return Check(
        TRAJECTORY,
        name,
        title,
        verdict,
        finding,
        evidence,
        advice_if(verdict, advice),
    )


def _logs(s: StepSeries) -> tuple[np.ndarray, np.ndarray]:
    ok = ~np.isnan(s.vllm_kl)
    return s.steps[ok], np.log10(np.maximum(s.vllm_kl[ok], T.VLLM_KL_FLOOR))


def spikes(ctx: Context) -> Check:
    advice = (
        "look at the spike steps (`mismatchctl report RUN --steps A..B --by-gpu`): which gpu and "
        "turn kind carry them, and whether entropy, perplexity and gradient norm spike with them"
    )
    return _per_run(ctx, "spikes", "Spikes of per-step vllm_kl", _spikes, advice, T.MIN_STEPS)


def _spikes(s: StepSeries) -> RunResult:
    steps, logs = _logs(s)
    z, median, _ = robust_z(logs)
    kl = 10**logs
    hit = (z >= T.SPIKE_Z) & (kl >= T.SPIKE_FACTOR * 10**median) & (kl > T.LOW_MAX)
    order = np.argsort(-kl[hit])[:MAX_LISTED]
    found = [
        {"step": int(steps[hit][i]), M.VLLM_KL: float(kl[hit][i]), "robust_z": float(z[hit][i])}
        for i in order
    ]
    verdict = grade(any(f[M.VLLM_KL] > T.MEDIUM_MAX for f in found), bool(found))
    finding = f"{int(hit.sum())} spike step(s) over a median of {fmt(10**median)}"
    if found:
        finding += " (steps " + ", ".join(str(f["step"]) for f in found[:5]) + ")"
    return verdict, finding, {"median_vllm_kl": 10**median, "spikes": found}


def trend(ctx: Context) -> Check:
    advice = (
        "the mismatch grows as training goes on: a run entering a numerically sensitive region "
        "keeps producing high-mismatch batches; find the step it starts at and check what "
        "changed there (learning rate, data, gpus), and consider a correction"
    )
    return _per_run(ctx, "trend", "Upward trend of per-step vllm_kl", _trend, advice, T.MIN_STEPS)


def _fit(steps: np.ndarray, logs: np.ndarray) -> dict[str, Any]:
    ts = theil_sen(steps, logs)
    if ts["slope"] is None:
        return {"rise_decades": 0.0, "positive_share": 0.5, "start": None, "end": None}
    start = ts["intercept"] + ts["slope"] * steps[0]
    end = ts["intercept"] + ts["slope"] * steps[-1]
    return {
        "slope_decades_per_100_steps": 100 * ts["slope"],
        "rise_decades": end - start,
        "positive_share": ts["positive_share"],
        "start": 10**start,
        "end": 10**end,
    }


def _trend(s: StepSeries) -> RunResult:
    fit = _fit(*_logs(s))
    rising = fit["positive_share"] >= T.TREND_POSITIVE_SHARE
    end = fit["end"] or 0.0
    fail = rising and fit["rise_decades"] >= T.TREND_RISE_FAIL and end > T.MEDIUM_MAX
    warn = rising and fit["rise_decades"] >= T.TREND_RISE_WARN and end > T.LOW_MAX
    finding = (
        f"fitted vllm_kl {fmt(fit['start'])} -> {fmt(fit['end'])} "
        f"(x{fmt(10 ** fit['rise_decades'])}; {pct(fit['positive_share'])} of step pairs rise)"
    )
    return grade(fail, warn), finding, fit


def spiral(ctx: Context) -> Check:
    advice = (
        "vllm_kl and the trainer's perplexity climb together: the feedback loop that preceded "
        "collapse in the studies; act before reward drops (sequence-level correction, other "
        "gpus, smaller top-p)"
    )
    return _per_run(
        ctx, "spiral", "vllm_kl and trainer_ppl rising together", _spiral, advice, T.MIN_STEPS
    )


def _spiral(s: StepSeries) -> RunResult:
    ok = ~np.isnan(s.vllm_kl) & ~np.isnan(s.trainer_ppl) & (s.trainer_ppl > 0)
    steps = s.steps[ok]
    logs = np.log10(np.maximum(s.vllm_kl[ok], T.VLLM_KL_FLOOR))
    ppl = np.log10(s.trainer_ppl[ok])
    rho = spearman(logs, ppl) if len(steps) >= 3 else None
    kl_fit, ppl_fit = _fit(steps, logs), _fit(steps, ppl)
    both = min(kl_fit["positive_share"], ppl_fit["positive_share"]) >= T.TREND_POSITIVE_SHARE
    together = rho is not None and rho >= T.SPIRAL_RHO and both
    fail = together and (kl_fit["end"] or 0.0) > T.MEDIUM_MAX
    finding = (
        f"Spearman {fmt(rho)} between per-step vllm_kl and trainer_ppl; rising pairs "
        f"{pct(kl_fit['positive_share'])} and {pct(ppl_fit['positive_share'])}"
    )
    evidence = {
        "spearman": rho,
        "vllm_kl_positive_share": kl_fit["positive_share"],
        "trainer_ppl_positive_share": ppl_fit["positive_share"],
    }
    return grade(fail, together), finding, evidence


def severe_batches(ctx: Context) -> Check:
    advice = (
        f"batches above vllm_kl {T.HIGH_MAX:g} were filtered out in the study; see the objective "
        "check and `mismatchctl whatif` for what a filter or a correction would remove"
    )
    return _per_run(ctx, "severe_batches", "Batches in the severe band", _severe, advice, 1)


def _severe(s: StepSeries) -> RunResult:
    n = len(s.bands)
    severe = [int(st) for st, b in zip(s.steps, s.bands, strict=True) if b == "severe"]
    high = sum(b in ("high", "severe") for b in s.bands)
    share, high_share = len(severe) / n, high / n
    verdict = grade(share >= T.SEVERE_FAIL_SHARE, bool(severe) or high_share >= T.HIGH_WARN_SHARE)
    finding = (
        f"{len(severe)} of {n} batches severe ({pct(share)}), {pct(high_share)} high or severe"
    )
    evidence = {
        "severe_share": share,
        "high_or_severe_share": high_share,
        "severe_steps": severe[:MAX_LISTED],
    }
    return verdict, finding, evidence


def staleness(ctx: Context) -> Check:
    title = "Mismatch of rollouts made with older weights"
    lags = ctx.state.weight_lags
    known = {lag: n for lag, n in lags.tokens.items() if lag is not None and n > 0}
    if not known:
        return Check(
            TRAJECTORY, "staleness", title, NA,
            "no weight version in the dumps, so no weight lag",
            {}, "keep a weight_version (or model_version) column in the dumps to check staleness",
        )  # fmt: skip
    fresh = _pooled(lags, [lag for lag in known if lag == 0])
    stale = _pooled(lags, [lag for lag in known if lag >= 1])
    negative = any(lag < 0 for lag in known)
    factor = stale / fresh if stale is not None and fresh else None
    worse = factor or 0.0
    fail = worse >= T.STALE_FACTOR_FAIL and (stale or 0.0) > T.MEDIUM_MAX
    warn = negative or (worse >= T.STALE_FACTOR_WARN and (stale or 0.0) > T.LOW_MAX)
    finding = f"vllm_kl {fmt(fresh)} at lag 0 vs {fmt(stale)} at lag >= 1 (x{fmt(factor)})"
    if stale is None:
        finding = (
            f"every rollout with a known version used the current weights (vllm_kl {fmt(fresh)})"
        )
    if fresh is None:  # nothing to compare with: judge the stale mismatch on the severity bands
        lag_max = max(known)
        finding = (
            f"every rollout came from older weights (lag up to {lag_max}): vllm_kl {fmt(stale)}, "
            "no lag-0 rollouts to compare with"
        )
        fail = (stale or 0.0) > T.MEDIUM_MAX
        warn = warn or (stale or 0.0) > T.LOW_MAX
    if negative:
        finding += "; some weight versions are ahead of their step"
    advice = (
        "rollouts from older weights carry more mismatch: check the in-flight weight update "
        "(vLLM: pause with mode='keep', clear_cache=False; no prefix caching across updates) "
        "and the version column; bound the staleness"
    )
    verdict = grade(fail, warn)
    evidence = {"lags": _lag_rows(lags, known), "factor": factor}
    return Check(
        TRAJECTORY, "staleness", title, verdict, finding, evidence, advice_if(verdict, advice)
    )


def _lag_rows(lags: LagSums, known: dict[int, float]) -> list[dict[str, Any]]:
    return [
        {
            "lag": lag,
            M.TOKENS: int(n),
            M.SEQUENCES: int(lags.sequences.get(lag, 0)),
            M.VLLM_KL: lags.k3.get(lag, 0.0) / n,
        }
        for lag, n in sorted(known.items())
    ]


def _pooled(lags: LagSums, which: list[int]) -> float | None:
    n = sum(lags.tokens[lag] for lag in which)
    return sum(lags.k3.get(lag, 0.0) for lag in which) / n if n else None
