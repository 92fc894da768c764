"""Checks of the trajectory layer: how each run's per-batch vllm_kl moves over the steps, and
whether stale weights carry more of it. Per-run results are combined: the worst run decides."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from mismatchctl.analysis import diagnose_thresholds as T
from mismatchctl.analysis.diagnose_base import (
    FAIL,
    MAX_LISTED,
    NA,
    OK,
    TRAJECTORY,
    WARN,
    Check,
    Context,
    RunView,
    StepSeries,
    advice_if,
    ci_text,
    fmt,
    grade,
    pct,
    relative,
    worst,
)
from mismatchctl.analysis.diagnose_extra import LagSums
from mismatchctl.engines import plan as K
from mismatchctl.stats import registry as M
from mismatchctl.stats.localize_math import norm_ppf, relvar, sandwich_var
from mismatchctl.stats.localize_result import ratio_text
from mismatchctl.stats.robust import spearman, theil_sen

RunResult = tuple[str, str, dict[str, Any]]  # verdict, finding, evidence
PerRun = Callable[[RunView, StepSeries], RunResult]


def _per_run(ctx: Context, name: str, title: str, fn: PerRun, advice: str, need: int) -> Check:
    results = {
        run: fn(view, ctx.series[run])
        for run, view in ctx.runs.items()
        if run in ctx.series and len(view.rates) >= need
    }
    if not results:
        return Check(
            TRAJECTORY, name, title, NA,
            f"no run has the {need} steps needed", {"min_steps": need},
        )  # fmt: skip
    verdict = worst([v for v, _, _ in results.values()])
    shown = [run for run, (v, _, _) in results.items() if v == verdict]
    many = len(results) > 1
    finding = "; ".join((f"{run}: " if many else "") + results[run][1] for run in shown[:3])
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


def split_kind(view: RunView) -> str | None:
    """``spikes``, ``regimes`` (or ``step change``: the elevated steps run from one step to the
    last) for a split that passes its tests (diagnose_thresholds), None when the steps are one
    regime."""
    sp = view.split
    if sp is None or len(view.rates) < T.MIN_STEPS or sp.p_value >= T.REGIME_ALPHA:
        return None
    if relative(sp.ratio, sp.ci, T.REGIME_FACTOR, T.REGIME_CI_LOW, math.inf) == OK:
        return None
    n = len(view.rates)
    if len(sp.elevated) <= max(1, math.floor(T.SPIKE_MAX_SHARE * n)):
        return "spikes"
    tail = list(range(n - len(sp.elevated), n))
    return "step change" if sp.elevated == tail else "regimes"


SPLIT_KINDS = ("regimes", "step change")  # what the regimes check reports


def _split_result(view: RunView, kinds: tuple[str, ...]) -> RunResult:
    sp, rates = view.split, view.rates
    kind = split_kind(view)
    evidence: dict[str, Any] = {"steps": _step_rows(view)}
    if sp is None:
        return OK, "one regime: no step differs from the others", evidence
    steps = [rates.labels[i] for i in sp.elevated]
    evidence.update(
        {
            "kind": kind,
            "elevated_steps": steps[:MAX_LISTED],
            "rate_ratio": sp.ratio,
            "rate_ratio_ci": list(sp.ci),
            "elevated_vllm_kl": sp.elevated_level,
            "other_vllm_kl": sp.rest_level,
            "homogeneity_p": sp.p_value,
            "spread": sp.spread,
        }
    )
    listed = ", ".join(steps[:8]) + (f" and {len(steps) - 8} more" if len(steps) > 8 else "")
    body = (
        f"step{'s' if len(steps) > 1 else ''} {listed} at {ratio_text(sp.ratio)}x the other "
        f"steps' rate at the same token mix ({ci_text(sp.ci)}; vllm_kl {fmt(sp.elevated_level)} "
        f"vs {fmt(sp.rest_level)})"
    )
    if kind not in kinds:
        if kind is None:
            return (
                OK,
                f"one regime: the steps differ by a factor {fmt(sp.spread, 2)} at most",
                evidence,
            )
        return (
            OK,
            f"none isolated: {body} form a {kind} (see {'regimes' if kind != 'spikes' else 'spikes'})",
            evidence,
        )
    verdict = relative(
        sp.ratio, sp.ci, T.REGIME_FACTOR, T.REGIME_CI_LOW, T.REGIME_FAIL, sp.elevated_level
    )
    if kind == "step change":
        body = f"from step {steps[0]} on, {body}"
    if smooth_growth(view):
        evidence["smooth_rise"] = True
        body += "; the steps follow a rising line as closely as two levels (the trend check)"
    return verdict, f"{kind}: {body}", evidence


def _step_rows(view: RunView) -> list[dict[str, Any]]:
    r = view.rates
    return [
        {
            "step": r.labels[i],
            M.TOKENS: int(r.tokens[i]),
            "rate_ratio": float(r.ratio[i]),
            "log_sd": float(np.sqrt(r.log_var[i])),
        }
        for i in range(min(len(r), MAX_LISTED * 10))
    ]


def spikes(ctx: Context) -> Check:
    advice = (
        "look at the spike steps (`mismatchctl report RUN --steps A..B --by-gpu`, `mismatchctl "
        "explain RUN`): which gpu, turn kind or position carries them, and whether entropy, "
        "perplexity and gradient norm spike with them"
    )
    return _per_run(
        ctx, "spikes", "Isolated steps above the others", lambda v, _: _split_result(v, ("spikes",)),
        advice, T.MIN_STEPS,
    )  # fmt: skip


def regimes(ctx: Context) -> Check:
    advice = (
        "two regimes: some steps run at the healthy level, others far above it; a code path only "
        "some steps take (a kernel chosen by batch shape or KV length, one engine instance, a "
        "gpu) has this signature: `mismatchctl explain RUN` says what the elevated steps share"
    )
    check = _per_run(
        ctx, "regimes", "Steps in a healthy and an elevated regime",
        lambda v, _: _split_result(v, SPLIT_KINDS), advice, T.MIN_STEPS,
    )  # fmt: skip
    if check.next is not None and regimes_are_growth(ctx):
        check.next = GROWTH_STEPS_ADVICE
    return check


GROWTH_STEPS_ADVICE = (
    "the elevated steps are the late ones of a mismatch that rises along a line, not a jump to a "
    "second level: a growth (the trend check), not a code path some steps take; see the trend "
    "and cause checks"
)


def smooth_growth(view: RunView) -> bool:
    """The run's rate rises (the trend check) and its steps follow the line at least as
    closely as any change point (``StepTrend.smooth``)."""
    return rising(view) and view.trend is not None and view.trend.smooth


def regimes_are_growth(ctx: Context) -> bool:
    """Every run whose steps split into two groups grows smoothly: the groups are a line cut."""
    split = [view for view in ctx.runs.values() if split_kind(view) in SPLIT_KINDS]
    return bool(split) and all(smooth_growth(view) for view in split)


def steps_are_growth(ctx: Context, runs: dict[str, dict[str, Any]]) -> bool:
    """The localized check's first finding in each run (``runs``: its evidence) is a set of
    steps alone, of a run that grows smoothly: the late steps of a growth."""
    firsts = {
        run: e["code_path_findings"][0]["where"]
        for run, e in runs.items()
        if e["code_path_findings"]
    }
    return bool(firsts) and all(
        set(where) == {K.STEP} and run in ctx.runs and smooth_growth(ctx.runs[run])
        for run, where in firsts.items()
    )


def trend(ctx: Context) -> Check:
    advice = (
        "the mismatch grows as training goes on: a run entering a numerically sensitive region "
        "keeps producing high-mismatch batches; find the step it starts at and check what "
        "changed there (learning rate, data, gpus), and `mismatchctl explain 'RUN@steps=LATE' "
        "--baseline 'RUN@steps=EARLY'` (mix or rate?)"
    )
    return _per_run(ctx, "trend", "Upward trend of the per-step rate", _trend, advice, T.MIN_STEPS)


def rising(view: RunView) -> bool:
    """The run's per-step rate rises by the trend check's factor, significantly."""
    tr = view.trend
    return tr is not None and tr.rise >= T.TREND_RISE_WARN and tr.ci[0] >= T.TREND_CI_LOW


def _trend(view: RunView, _: StepSeries) -> RunResult:
    tr = view.trend
    if tr is None:
        return OK, "too few steps with a rate to fit a line", {}
    evidence = {
        "rise": tr.rise,
        "rise_ci": list(tr.ci),
        "start_vllm_kl": tr.start,
        "end_vllm_kl": tr.end,
        "spread": tr.spread,
        "steps": tr.steps,
    }
    verdict = relative(tr.rise, tr.ci, T.TREND_RISE_WARN, T.TREND_CI_LOW, T.TREND_RISE_FAIL, tr.end)
    finding = (
        f"fitted rate x{ratio_text(tr.rise)} from the first to the last step ({ci_text(tr.ci)}; "
        f"vllm_kl {fmt(tr.start)} -> {fmt(tr.end)} at the run's token mix)"
    )
    return verdict, finding, evidence


def _fit(steps: np.ndarray, logs: np.ndarray) -> dict[str, Any]:
    ts = theil_sen(steps, logs)
    if ts["slope"] is None:
        return {"positive_share": 0.5}
    return {"positive_share": ts["positive_share"]}


def spiral(ctx: Context) -> Check:
    advice = (
        "vllm_kl and the trainer's perplexity climb together: the feedback loop that preceded "
        "collapse in the studies; act before reward drops (sequence-level correction, other "
        "gpus, smaller top-p)"
    )
    return _per_run(
        ctx, "spiral", "vllm_kl and trainer_ppl rising together", _spiral, advice, T.MIN_STEPS
    )


def _spiral(view: RunView, s: StepSeries) -> RunResult:
    ok = ~np.isnan(s.vllm_kl) & ~np.isnan(s.trainer_ppl) & (s.trainer_ppl > 0)
    steps = s.steps[ok]
    logs = np.log10(np.maximum(s.vllm_kl[ok], T.VLLM_KL_FLOOR))
    ppl = np.log10(s.trainer_ppl[ok])
    rho = spearman(logs, ppl) if len(steps) >= 3 else None
    ppl_fit = _fit(steps, ppl)
    kl_up = rising(view)
    together = (
        rho is not None
        and rho >= T.SPIRAL_RHO
        and kl_up
        and ppl_fit["positive_share"] >= T.TREND_POSITIVE_SHARE
    )
    fail = together and view.trend is not None and view.trend.end > T.MEDIUM_MAX
    finding = (
        f"Spearman {fmt(rho)} between per-step vllm_kl and trainer_ppl; vllm_kl "
        f"{'rising' if kl_up else 'not rising'} (trend check), trainer_ppl rising on "
        f"{pct(ppl_fit['positive_share'])} of step pairs"
    )
    evidence = {
        "spearman": rho,
        "vllm_kl_rising": kl_up,
        "trainer_ppl_positive_share": ppl_fit["positive_share"],
    }
    return grade(fail, together), finding, evidence


def severe_batches(ctx: Context) -> Check:
    advice = (
        f"batches above vllm_kl {T.HIGH_MAX:g} were filtered out in the study; see the objective "
        "check and `mismatchctl whatif` for what a filter or a correction would remove"
    )
    return _per_run(
        ctx, "severe_batches", "Batches in the severe band", lambda _, s: _severe(s), advice, 1
    )


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


STALE_ADVICE = (
    "rollouts from older weights are a policy mismatch, not a numeric one: check the weight "
    "sync path (the engine must receive this step's weights before sampling; vLLM: pause with "
    "mode='keep', clear_cache=False; no prefix caching across updates) and bound the staleness; "
    "if the lag is intended (asynchronous RL), correct it as off-policy data (decoupled PPO with "
    "the behaviour policy's logprobs), not as training-inference mismatch"
)


def staleness(ctx: Context) -> Check:
    title = "Rollouts made with older weights"
    lags = ctx.state.weight_lags
    known = {lag: n for lag, n in lags.tokens.items() if lag is not None and n > 0}
    tagged = tagged_lags(ctx)
    if not known:
        if not tagged:
            return Check(
                TRAJECTORY, "staleness", title, NA,
                "no weight version in the dumps and no weight_lag tag, so no weight lag",
                {}, "keep a weight_version (or model_version) column in the dumps, or tag the run "
                "--tag weight_lag=N, to check staleness",
            )  # fmt: skip
        return _tagged(ctx, title, tagged)
    fresh = _rate(lags, [lag for lag in known if lag == 0])
    stale = _rate(lags, [lag for lag in known if lag >= 1])
    negative = any(lag < 0 for lag in known)
    evidence: dict[str, Any] = {"lags": _lag_rows(lags, known)}
    if stale is None:
        finding = f"every rollout with a known version used the current weights (vllm_kl {fmt(fresh and fresh[0])})"
        verdict = WARN if negative else OK
    elif fresh is None:
        lag_max = max(known)
        finding = (
            f"every rollout came from older weights (lag up to {lag_max}, vllm_kl "
            f"{fmt(stale[0])}): a policy mismatch by construction"
        )
        verdict = FAIL if stale[0] > T.MEDIUM_MAX else WARN
    else:
        ratio = stale[0] / fresh[0] if fresh[0] > 0 else math.inf
        half = norm_ppf(1 - (1 - T.LEVEL) / 2) * math.sqrt(stale[1] + fresh[1])
        ci = (ratio * math.exp(-half), ratio * math.exp(half)) if math.isfinite(ratio) else None
        evidence.update({"factor": ratio, "factor_ci": None if ci is None else list(ci)})
        verdict = relative(ratio, ci, T.STALE_FACTOR, T.STALE_CI_LOW, T.STALE_FAIL, stale[0])
        finding = (
            f"vllm_kl {fmt(fresh[0])} at lag 0 vs {fmt(stale[0])} at lag >= 1 "
            f"(x{ratio_text(ratio)}, {ci_text(ci)})"
        )
        if negative:
            verdict = worst([verdict, WARN])
    if negative:
        finding += "; some weight versions are ahead of their step"
    return Check(
        TRAJECTORY, "staleness", title, verdict, finding, evidence, advice_if(verdict, STALE_ADVICE)
    )


def tagged_lags(ctx: Context) -> dict[str, int]:
    """Runs of the selection tagged with a weight lag (``STALE_TAGS``), and the lag."""
    out = {}
    for run in ctx.report.selection.runs:
        for tag in T.STALE_TAGS:
            value = run.tags.get(tag)
            if value is not None and value.strip().lstrip("-").isdigit():
                out[run.name] = int(value)
                break
    return out


def _tagged(ctx: Context, title: str, tagged: dict[str, int]) -> Check:
    stale = {run: lag for run, lag in tagged.items() if lag != 0}
    evidence: dict[str, Any] = {"tagged_lags": tagged}
    if not stale:
        finding = "the runs are tagged with weight lag 0 (no version column to confirm it)"
        return Check(TRAJECTORY, "staleness", title, OK, finding, evidence)
    levels = {
        g.by[K.RUN]: g.metrics.get(M.VLLM_KL)
        for g in ctx.report.split(K.RUN)
        if g.by[K.RUN] in stale
    }
    worst_level = max((v or 0.0 for v in levels.values()), default=0.0)
    listed = ", ".join(
        f"{run} (weight_lag={lag}, vllm_kl {fmt(levels.get(run))})" for run, lag in stale.items()
    )
    finding = f"rollouts made with weights behind the trainer's: {listed}: a policy mismatch"
    verdict = FAIL if worst_level > T.MEDIUM_MAX else WARN
    return Check(TRAJECTORY, "staleness", title, verdict, finding, evidence, STALE_ADVICE)


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


def _rate(lags: LagSums, which: list[int]) -> tuple[float, float] | None:
    """The pooled rate of the lags and the sequence-clustered variance of its log."""
    n = sum(lags.tokens[lag] for lag in which)
    if not n:
        return None
    a = sum(lags.k3.get(lag, 0.0) for lag in which)
    moments = [sum(getattr(lags, f).get(lag, 0.0) for lag in which) for f in ("yy", "xx", "xy")]
    g = sum(lags.sequences.get(lag, 0.0) for lag in which)
    var = sandwich_var(np.array(n), np.array(a), *(np.array(m) for m in moments), np.array(g))
    return a / n, float(relvar(var, np.array(a)))
