"""Compare two slices of the store: what differs in configuration, in the headline numbers (with
bootstrap intervals), and where (probability bins, turn kinds, gpus, steps)."""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from mismatchctl.analysis.compare_curves import CurvePair, compare_curves
from mismatchctl.analysis.report import Report, report_on
from mismatchctl.analysis.selection import parse_selector, reread, resolve
from mismatchctl.analysis.sequences import SequenceSums
from mismatchctl.engines import plan as K
from mismatchctl.engines.choice import LOCAL_ENGINE, Engine
from mismatchctl.engines.plan import Selection
from mismatchctl.errors import UsageError
from mismatchctl.parallel import DEFAULT_WORKERS
from mismatchctl.stats import registry as M
from mismatchctl.stats.bootstrap import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Interval,
    draws,
    side_generators,
)
from mismatchctl.stats.bootstrap import intervals as bootstrap_intervals
from mismatchctl.store import Store

HEADLINE = (
    M.TOKENS,
    M.SEQUENCES,
    M.VLLM_KL,
    M.KL_K1,
    M.LOG_RATIO_MEAN,
    M.ABS_LOG_RATIO_MEAN,
    M.PROB_ABS_DIFF_MEAN,
    M.PROB_PEARSON,
    M.LOG_PPL_PEARSON,
    M.TRAINER_PPL,
    M.VLLM_KL_SEQ_MEAN,
)
CROSS: K.Split = (K.TURN_KIND, K.BIN)


@dataclass
class Comparison:
    a: Report
    b: Report
    config: list[dict[str, Any]]
    headline: list[dict[str, Any]]
    bins: list[dict[str, Any]]
    turn_kinds: list[dict[str, Any]]
    gpus: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    gap: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    curves: list[CurvePair] = field(default_factory=list)  # training curves, aligned on step


def build_comparison(
    store: Store,
    a: str,
    b: str,
    *,
    bins: str = "log",
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    figures: bool = False,
    engine: Engine = LOCAL_ENGINE,
) -> Comparison:
    """Selectors ``a`` and ``b`` side by side; a UsageError when both hold the same data."""

    def side(sel: Selection) -> Report:
        return report_on(
            sel,
            bins=bins,
            by=[CROSS],
            by_gpu=True,
            workers=workers,
            on_part=on_part,
            extras=[SequenceSums()],
            figures=figures,
            engine=engine,
        )

    def build() -> Comparison:
        sides = (resolve(store, parse_selector(a)), resolve(store, parse_selector(b)))
        if same_selection(*sides):
            raise same_data_error(*sides)
        ra, rb, intervals = _read_sides(sides, side, resamples, seed)
        return _comparison(sides, ra, rb, intervals)

    return reread(build)


def same_selection(a: Selection, b: Selection) -> bool:
    """Both sides read the same parts with the same row filter (known before reading)."""
    return (a.tasks, a.sequence_paths, a.rows) == (b.tasks, b.sequence_paths, b.rows)


def same_data_error(a: Selection, b: Selection, sequences: int | None = None) -> UsageError:
    held = f", {sequences:,} sequences" if sequences is not None else ""
    return UsageError(
        f"`{a.label}` and `{b.label}` hold the same data (run {', '.join(a.names)}{held}): "
        "a comparison with itself has no difference to show",
        "compare two different runs or slices (e.g. `mismatchctl compare RUN_A RUN_B`, "
        "`mismatchctl compare gpu=H20 gpu=L20`); `mismatchctl report RUN` describes one.",
    )


def _read_sides(
    sides: tuple[Selection, Selection],
    side: Callable[[Selection], Report],
    resamples: int,
    seed: int,
) -> tuple[Report, Report, dict[str, Interval]]:
    """Both sides read, and the bootstrap intervals of their difference (none when they turn
    out to hold the same sequences: a UsageError)."""
    rng_a, rng_b = side_generators(seed)
    with ThreadPoolExecutor(max_workers=1) as pool:
        ra = side(sides[0])
        # side A's bootstrap runs while side B is read (the engine leaves a core partly idle)
        draws_a = pool.submit(draws, ra.extra_states[0], resamples, rng_a)
        rb = side(sides[1])
        if ra.extra_states[0].same(rb.extra_states[0]):
            draws_a.cancel()
            raise same_data_error(*sides, len(rb.extra_states[0]))
        draws_b = draws(rb.extra_states[0], resamples, rng_b)
        intervals = bootstrap_intervals(draws_a.result(), draws_b)
    return ra, rb, intervals


def _comparison(
    sides: tuple[Selection, Selection], ra: Report, rb: Report, intervals: dict[str, Interval]
) -> Comparison:
    steps, notes = _steps(ra, rb)
    for sel, rep in zip(sides, (ra, rb), strict=True):
        if len(rep.curves) > 1:
            notes.append(
                f"training curves: `{sel.label}` holds {len(rep.curves)} runs; its curves are "
                f"compared on its first run, {next(iter(rep.curves))}"
            )
    comparison = Comparison(
        ra,
        rb,
        config_diff(sides[0], sides[1]),
        _headline(ra, rb, intervals),
        _bins(ra, rb),
        _keyed(ra, rb, K.TURN_KIND),
        _keyed(ra, rb, K.GPU),
        steps,
        gap_decomposition(ra, rb),
        notes,
    )
    comparison.curves = compare_curves(ra, rb, sides[0].label, sides[1].label)
    return comparison


def config_diff(a: Selection, b: Selection) -> list[dict[str, Any]]:
    """Tags whose values differ between the two sides (a side's values joined when several)."""

    def values(sel: Selection) -> dict[str, str]:
        out: dict[str, set[str]] = {"run": set(sel.names), "gpu (rows)": set()}
        for run in sel.runs:
            out["gpu (rows)"] |= set(run.gpus)
            for src in run.sources:
                if all(src.tags.get(k) == v for k, v in sel.tags.items()):
                    for key, value in src.tags.items():
                        if key != "gpu":  # the per-row gpu below already reflects the gpu tag
                            out.setdefault(key, set()).add(value)
        if sel.rows.gpu is not None:
            out["gpu (rows)"] = {sel.rows.gpu}
        if sel.steps is not None:
            out["steps"] = {str(sel.steps)}
        return {k: ",".join(sorted(v)) for k, v in out.items() if v}

    va, vb = values(a), values(b)
    return [
        {"key": key, "a": va.get(key), "b": vb.get(key)}
        for key in sorted(set(va) | set(vb))
        if va.get(key) != vb.get(key)
    ]


def ratio(a: float | int | None, b: float | int | None) -> float | None:
    if a is None or b is None or a == 0 or not math.isfinite(a) or not math.isfinite(b):
        return None
    return b / a


def _headline(ra: Report, rb: Report, intervals: dict[str, Interval]) -> list[dict[str, Any]]:
    ma, mb = ra.whole().metrics, rb.whole().metrics  # type: ignore[union-attr]
    rows = []
    for name in HEADLINE:
        x, y = ma.get(name), mb.get(name)
        row: dict[str, Any] = {
            "metric": name,
            "a": x,
            "b": y,
            "difference": None if x is None or y is None else y - x,
            "ratio": 1.0 if x == y and x is not None else ratio(x, y),
        }
        if name in intervals:
            iv = intervals[name]
            # a side beyond float64 (overflow) has no interval: its resamples are not numbers
            finite = x is not None and y is not None and math.isfinite(x) and math.isfinite(y)
            low, high = (iv.low, iv.high) if finite else (None, None)
            row.update({"ci_of": iv.kind, "ci_low": low, "ci_high": high})
            row["significant"] = _significant(iv) if finite else None
            row["verdict"] = verdict(name, row, ra.selection.label, rb.selection.label)
        rows.append(row)
    return rows


def verdict(name: str, row: dict[str, Any], a: str, b: str) -> str:
    """One plain sentence: B's metric relative to A's, with its 95% interval, or no difference."""
    lo, hi = row.get("ci_low"), row.get("ci_high")
    ci = "" if lo is None or hi is None else f" (95% CI {lo:.3g} to {hi:.3g})"
    if row["a"] is None or row["b"] is None:
        return f"{name}: not computable on both sides"
    beyond = [side for side, x in ((a, row["a"]), (b, row["b"])) if not math.isfinite(x)]
    if beyond:
        return f"{name}: no comparison: overflow (beyond float64) in {' and '.join(beyond)}"
    if row["ci_of"] == "ratio":
        if row["ratio"] is None:
            return f"{name}: no ratio ({a}'s is 0)"
        if not row["significant"]:
            return f"{name}: no significant difference (B/A = {row['ratio']:.3g}{ci})"
        return f"{b}'s {name} is {row['ratio']:.3g}x {a}'s{ci}"
    if not row["significant"]:
        return f"{name}: no significant difference (B-A = {row['difference']:+.3g}{ci})"
    word = "higher" if row["difference"] > 0 else "lower"
    return f"{b}'s {name} is {abs(row['difference']):.3g} {word} than {a}'s{ci}"


def _significant(iv: Interval) -> bool | None:
    if iv.low is None or iv.high is None:
        return None
    null = 1.0 if iv.kind == "ratio" else 0.0
    return not (iv.low <= null <= iv.high)


def _bins(ra: Report, rb: Report) -> list[dict[str, Any]]:
    a = {g.by[K.BIN]: g.metrics for g in ra.split(K.BIN)}
    b = {g.by[K.BIN]: g.metrics for g in rb.split(K.BIN)}
    rows = []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k, {}), b.get(k, {})
        rows.append(
            {
                "bin": k,
                "a_tokens": x.get(M.TOKENS, 0),
                "b_tokens": y.get(M.TOKENS, 0),
                "a_token_share": x.get(M.TOKEN_SHARE),
                "b_token_share": y.get(M.TOKEN_SHARE),
                "a_vllm_kl": x.get(M.VLLM_KL),
                "b_vllm_kl": y.get(M.VLLM_KL),
                "a_kl_share": x.get(M.KL_SHARE),
                "b_kl_share": y.get(M.KL_SHARE),
                "vllm_kl_ratio": ratio(x.get(M.VLLM_KL), y.get(M.VLLM_KL)),
            }
        )
    return rows


def _keyed(ra: Report, rb: Report, key: str) -> list[dict[str, Any]]:
    a = {g.by[key]: g.metrics for g in ra.split(key)}
    b = {g.by[key]: g.metrics for g in rb.split(key)}
    rows = []
    for k in sorted(set(a) | set(b), key=lambda v: (v is None, str(v))):
        x, y = a.get(k, {}), b.get(k, {})
        rows.append(
            {
                key: k,
                "a_tokens": x.get(M.TOKENS, 0),
                "b_tokens": y.get(M.TOKENS, 0),
                "a_vllm_kl": x.get(M.VLLM_KL),
                "b_vllm_kl": y.get(M.VLLM_KL),
                "vllm_kl_ratio": ratio(x.get(M.VLLM_KL), y.get(M.VLLM_KL)),
                "a_log_ppl_pearson": x.get(M.LOG_PPL_PEARSON),
                "b_log_ppl_pearson": y.get(M.LOG_PPL_PEARSON),
            }
        )
    return rows


def _steps(ra: Report, rb: Report) -> tuple[list[dict[str, Any]], list[str]]:
    """Per-step vllm_kl of both sides aligned on step numbers (runs of a side merged per step)."""

    def series(rep: Report) -> dict[int, Any]:
        per_step: dict[int, Any] = {}
        for g in rep.split(K.RUN, K.STEP):
            step = g.by[K.STEP]
            per_step[step] = per_step[step].merge(g.partial) if step in per_step else g.partial
        return {s: p.finalize()[M.VLLM_KL] for s, p in per_step.items()}

    a, b = series(ra), series(rb)
    notes = []
    if not set(a) & set(b):
        notes.append(
            "the two sides share no step: per-step values are shown side by side, "
            "pooled metrics are still compared"
        )
    rows = [
        {
            "step": s,
            "a_vllm_kl": a.get(s),
            "b_vllm_kl": b.get(s),
            "vllm_kl_ratio": ratio(a.get(s), b.get(s)),
        }
        for s in sorted(set(a) | set(b))
    ]
    return rows, notes


def gap_decomposition(ra: Report, rb: Report, top: int = 5) -> list[dict[str, Any]]:
    """Where the vllm_kl gap lives: each (turn kind, bin) cell's K3 mass per token of its side,
    B minus A; the cells' contributions add up to vllm_kl(B) - vllm_kl(A)."""
    ta, tb = ra.whole().partial.tokens, rb.whole().partial.tokens  # type: ignore[union-attr]
    a = {tuple(g.by.values()): g.partial.k3_sum / ta for g in ra.split(*CROSS)}
    b = {tuple(g.by.values()): g.partial.k3_sum / tb for g in rb.split(*CROSS)}
    gap = sum(b.values()) - sum(a.values())
    cells = []
    for key in set(a) | set(b):
        contribution = b.get(key, 0.0) - a.get(key, 0.0)
        cells.append(
            {
                K.TURN_KIND: key[0],
                K.BIN: key[1],
                "contribution": contribution,
                "share_of_gap": contribution / gap if gap else None,
            }
        )
    cells.sort(key=lambda c: -abs(c["contribution"]))
    return cells[:top]
