"""Compare two slices of the store: what differs in configuration, in the headline numbers (with
bootstrap intervals), and where (probability bins, turn kinds, gpus, steps)."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from mismatchctl.analysis.compare.curves import CurvePair, compare_curves, pair_dict
from mismatchctl.analysis.compare.same import SAME_PARTS, SAME_SEQUENCES, Identical, same_routing
from mismatchctl.analysis.pairing.pairing import (
    PairExtra,
    Pairing,
    Side,
    not_paired,
    pair_sides,
    readable,
)
from mismatchctl.analysis.report.report import Report, parse_binning, reports_on
from mismatchctl.analysis.report.sequences import SequenceSums
from mismatchctl.analysis.selection import reread, resolve_text, same_selection
from mismatchctl.engines import plan as K
from mismatchctl.engines.choice import LOCAL_ENGINE, Engine
from mismatchctl.engines.plan import Selection
from mismatchctl.engines.rollup import sort_key
from mismatchctl.parallel import DEFAULT_WORKERS
from mismatchctl.stats import registry as M
from mismatchctl.stats.bootstrap import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Draws,
    Interval,
    SeqStats,
    draws,
    side_generators,
)
from mismatchctl.stats.bootstrap import intervals as bootstrap_intervals
from mismatchctl.stats.tails import DEFAULT_TAILS, Tails
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


@dataclass(frozen=True)
class ConfigRow:
    """A tag (or run, gpu, step range) whose values differ between the sides."""

    key: str
    a: str | None
    b: str | None


@dataclass(frozen=True)
class HeadlineRow:
    """A headline metric of both sides; for vllm_kl, |r| mean and log-ppl Pearson also the 95%
    bootstrap interval of B/A (or B-A), whether it excludes no difference, and a sentence."""

    metric: str
    a: float | int | None
    b: float | int | None
    difference: float | None
    ratio: float | None
    ci_of: str | None = None  # "ratio" or "difference"; None: no interval for this metric
    ci_low: float | None = None
    ci_high: float | None = None
    significant: bool | None = None
    verdict: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.ci_of is None:
            for k in ("ci_of", "ci_low", "ci_high", "significant", "verdict"):
                del out[k]
        return out


@dataclass(frozen=True)
class BinRow:
    bin: int
    a_tokens: int
    b_tokens: int
    a_token_share: float | None
    b_token_share: float | None
    a_vllm_kl: float | None
    b_vllm_kl: float | None
    a_kl_share: float | None
    b_kl_share: float | None
    vllm_kl_ratio: float | None


@dataclass(frozen=True)
class KeyedRow:
    """Both sides per value of a key (turn kind, gpu)."""

    key: str  # the key's name: the JSON names its value by it
    value: str | int | float | list[str | int | float | None] | None
    a_tokens: int
    b_tokens: int
    a_vllm_kl: float | None
    b_vllm_kl: float | None
    vllm_kl_ratio: float | None
    a_log_ppl_pearson: float | None
    b_log_ppl_pearson: float | None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["key"], out["value"]
        return {self.key: self.value, **out}


@dataclass(frozen=True)
class StepRow:
    step: int
    a_vllm_kl: float | None
    b_vllm_kl: float | None
    vllm_kl_ratio: float | None


@dataclass(frozen=True)
class GapCell:
    """A (turn kind, bin) cell's part of vllm_kl(B) - vllm_kl(A)."""

    turn_kind: str
    bin: int
    contribution: float
    share_of_gap: float | None


@dataclass(frozen=True)
class Comparison:
    a: Report
    b: Report
    config: list[ConfigRow]
    headline: list[HeadlineRow]
    bins: list[BinRow]
    turn_kinds: list[KeyedRow]
    gpus: list[KeyedRow]
    steps: list[StepRow]
    gap: list[GapCell]
    notes: list[str] = field(default_factory=list)
    splits: dict[K.Split, list[KeyedRow]] = field(default_factory=dict)  # the --by splits
    curves: list[CurvePair] = field(default_factory=list)  # training curves, aligned on step
    pairing: Pairing | None = None  # the paired comparison, or why there is none
    # both sides hold the same sequences with the same logprobs, and their MoE routes differ
    # (same routes too: ``same.Identical`` instead)
    same_logprobs: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The report shape with ``"side": "a"|"b"`` in every group's ``by``, and a
        ``comparison`` section."""
        return comparison_dict(self)

    def to_polars(self) -> Any:
        """The headline of both sides: one row per metric (a, b, difference, ratio, interval)."""
        import polars as pl

        return pl.DataFrame([row.to_dict() for row in self.headline], infer_schema_length=None)


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
    by: list[K.Split] | None = None,
    position_bins: str = "log2",
    tails: Tails = DEFAULT_TAILS,
) -> Comparison | Identical:
    """Selectors ``a`` and ``b`` side by side; :class:`Identical` when both hold the same data.
    ``by``: splits whose groups are shown side by side too (``kv_position``, ``attr:NAME``...);
    ``position_bins``: the edges of the position keys; ``tails``: the thresholds of the
    tail-robust metrics."""
    binning = parse_binning(position_bins, tails)
    extra = list(by or [])

    def build() -> Comparison | Identical:
        sides = (resolve_text(store, a), resolve_text(store, b))
        same = same_selection(*sides)
        unpaired = readable(*sides)  # known from the catalog: then no token id is read
        extras = [SequenceSums()] if same or unpaired else [SequenceSums(), PairExtra()]

        read = functools.partial(
            reports_on,
            bins=bins,
            by=[CROSS, *extra],
            binning=binning,
            by_gpu=True,
            workers=workers,
            on_part=on_part,
            extras=extras,
            figures=figures,
            engine=engine,
            routing_layers=True,  # the JSON's routing per MoE layer too
        )
        if same:  # the same parts and filter: one side read, for the numbers both hold
            return Identical(*sides, read([sides[0]])[0], SAME_PARTS)
        # the bootstrap's thread: each side's draws run while the engine reads on
        with ThreadPoolExecutor(max_workers=1) as pool:
            ra, rb, intervals, same_logprobs = _read_sides(sides, read, resamples, seed, pool)
            if intervals is None:
                return Identical(*sides, ra, SAME_SEQUENCES)
            # built while side B's draws finish: only the headline waits for its intervals
            pairing = (
                not_paired(unpaired)
                if unpaired
                else pair_sides(
                    Side.of(sides[0], ra.extra_states[1]),
                    Side.of(sides[1], rb.extra_states[1]),
                    resamples,
                    seed,
                )
            )
            splits = {split: keyed_rows(ra, rb, split) for split in extra}
            # same_logprobs: and their routes differ
            return _comparison(sides, ra, rb, intervals, splits, pairing, same_logprobs)

    return reread(build)


def _read_sides(
    sides: tuple[Selection, Selection],
    read: Callable[..., list[Report]],
    resamples: int,
    seed: int,
    pool: ThreadPoolExecutor,
) -> tuple[Report, Report, Callable[[], dict[str, Interval]] | None, bool]:
    """Both sides read in one pass of the engine (``reports_on``), the bootstrap intervals of
    their difference (a call that waits for them; None when the sides turn out to hold the
    same data: ``same.py``), and whether they hold the same sequences' logprobs (compared
    once: a sort of both sides). Each side's draws run on ``pool`` from when its parts are
    read: side A's while side B is read, side B's while side B's report is made whole and
    the comparison's tables are built."""
    rng_a, rng_b = side_generators(seed)
    sums: list[SeqStats] = []
    started: list[Future[Draws]] = []

    def side_read(i: int, states: list[Any]) -> None:
        sums.append(states[0])
        if i == 1 and sums[0].same(sums[1]):
            return  # the same logprobs: drawn only if their routes differ (below)
        # side B's with each next chunk drawn ahead: the parts are all read, a core is free
        started.append(pool.submit(draws, states[0], resamples, (rng_a, rng_b)[i], i == 1))

    ra, rb = read(list(sides), on_read=side_read)
    same_logprobs = len(started) == 1
    if same_logprobs and same_routing(ra, rb):
        started[0].cancel()
        return ra, rb, None, True
    if same_logprobs:  # the same logprobs, other routes
        started.append(pool.submit(draws, sums[1], resamples, rng_b, True))
    return (
        ra,
        rb,
        lambda: bootstrap_intervals(started[0].result(), started[1].result()),
        same_logprobs,
    )


def _comparison(
    sides: tuple[Selection, Selection],
    ra: Report,
    rb: Report,
    intervals: Callable[[], dict[str, Interval]],
    splits: dict[K.Split, list[KeyedRow]],
    pairing: Pairing,
    same_logprobs: bool,
) -> Comparison:
    """The comparison's tables, the headline last: it waits for the bootstrap's intervals."""
    steps, notes = _steps(ra, rb)
    for sel, rep in zip(sides, (ra, rb), strict=True):
        if len(rep.curves) > 1:
            notes.append(
                f"training curves: `{sel.label}` holds {len(rep.curves)} runs; its curves are "
                f"compared on its first run, {next(iter(rep.curves))}"
            )
    tables = {
        "bins": _bins(ra, rb),
        "turn_kinds": _keyed(ra, rb, K.TURN_KIND),
        "gpus": _keyed(ra, rb, K.GPU),
        "steps": steps,
        "gap": gap_decomposition(ra, rb),
        "curves": compare_curves(ra, rb, sides[0].label, sides[1].label),
    }
    return Comparison(
        ra,
        rb,
        config_diff(sides[0], sides[1]),
        _headline(ra, rb, intervals()),
        notes=notes,
        splits=splits,
        pairing=pairing,
        same_logprobs=same_logprobs,
        **tables,
    )


def config_diff(a: Selection, b: Selection) -> list[ConfigRow]:
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
        ConfigRow(key, va.get(key), vb.get(key))
        for key in sorted(set(va) | set(vb))
        if va.get(key) != vb.get(key)
    ]


def ratio(a: float | int | None, b: float | int | None) -> float | None:
    if a is None or b is None or a == 0 or not math.isfinite(a) or not math.isfinite(b):
        return None
    return b / a


def _headline(ra: Report, rb: Report, intervals: dict[str, Interval]) -> list[HeadlineRow]:
    ma, mb = ra.whole().metrics, rb.whole().metrics  # type: ignore[union-attr]
    rows = []
    for name in HEADLINE:
        x, y = ma.get(name), mb.get(name)
        row = HeadlineRow(
            name,
            x,
            y,
            None if x is None or y is None else y - x,
            1.0 if x == y and x is not None else ratio(x, y),
        )
        if name in intervals:
            iv = intervals[name]
            # a side beyond float64 (overflow) has no interval: its resamples are not numbers
            finite = x is not None and y is not None and math.isfinite(x) and math.isfinite(y)
            row = dataclasses.replace(
                row,
                ci_of=iv.kind,
                ci_low=iv.low if finite else None,
                ci_high=iv.high if finite else None,
                significant=_significant(iv) if finite else None,
            )
            row = dataclasses.replace(
                row, verdict=verdict(row, ra.selection.label, rb.selection.label)
            )
        rows.append(row)
    return rows


def verdict(row: HeadlineRow, a: str, b: str) -> str:
    """One plain sentence: B's metric relative to A's, with its 95% interval, or no difference."""
    name, lo, hi = row.metric, row.ci_low, row.ci_high
    ci = "" if lo is None or hi is None else f" (95% CI {lo:.3g} to {hi:.3g})"
    if row.a is None or row.b is None:
        return f"{name}: not computable on both sides"
    beyond = [side for side, x in ((a, row.a), (b, row.b)) if not math.isfinite(x)]
    if beyond:
        return f"{name}: no comparison: overflow (beyond float64) in {' and '.join(beyond)}"
    if row.ci_of == "ratio":
        if row.ratio is None:
            return f"{name}: no ratio ({a}'s is 0)"
        if not row.significant:
            return f"{name}: no significant difference (B/A = {row.ratio:.3g}{ci})"
        return f"{b}'s {name} is {row.ratio:.3g}x {a}'s{ci}"
    assert row.difference is not None
    if not row.significant:
        return f"{name}: no significant difference (B-A = {row.difference:+.3g}{ci})"
    word = "higher" if row.difference > 0 else "lower"
    return f"{b}'s {name} is {abs(row.difference):.3g} {word} than {a}'s{ci}"


def _significant(iv: Interval) -> bool | None:
    if iv.low is None or iv.high is None:
        return None
    null = 1.0 if iv.kind == "ratio" else 0.0
    return not (iv.low <= null <= iv.high)


def _bins(ra: Report, rb: Report) -> list[BinRow]:
    a = {g.by[K.BIN]: g.metrics for g in ra.split(K.BIN)}
    b = {g.by[K.BIN]: g.metrics for g in rb.split(K.BIN)}
    rows = []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k, {}), b.get(k, {})
        rows.append(
            BinRow(
                k,
                x.get(M.TOKENS, 0),
                y.get(M.TOKENS, 0),
                x.get(M.TOKEN_SHARE),
                y.get(M.TOKEN_SHARE),
                x.get(M.VLLM_KL),
                y.get(M.VLLM_KL),
                x.get(M.KL_SHARE),
                y.get(M.KL_SHARE),
                ratio(x.get(M.VLLM_KL), y.get(M.VLLM_KL)),
            )
        )
    return rows


def _keyed(ra: Report, rb: Report, key: str) -> list[KeyedRow]:
    return keyed_rows(ra, rb, (key,))


def keyed_rows(ra: Report, rb: Report, split: K.Split) -> list[KeyedRow]:
    """Both sides per group of a split (its key named by the split's keys joined by `` x ``; a
    value per key, a list of them for a split of several keys)."""
    a = {tuple(g.by[k] for k in split): g.metrics for g in ra.split(*split)}
    b = {tuple(g.by[k] for k in split): g.metrics for g in rb.split(*split)}
    rows = []
    for k in sorted(set(a) | set(b), key=sort_key):
        x, y = a.get(k, {}), b.get(k, {})
        rows.append(
            KeyedRow(
                " x ".join(split),
                k[0] if len(k) == 1 else list(k),
                x.get(M.TOKENS, 0),
                y.get(M.TOKENS, 0),
                x.get(M.VLLM_KL),
                y.get(M.VLLM_KL),
                ratio(x.get(M.VLLM_KL), y.get(M.VLLM_KL)),
                x.get(M.LOG_PPL_PEARSON),
                y.get(M.LOG_PPL_PEARSON),
            )
        )
    return rows


def _steps(ra: Report, rb: Report) -> tuple[list[StepRow], list[str]]:
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
        StepRow(s, a.get(s), b.get(s), ratio(a.get(s), b.get(s))) for s in sorted(set(a) | set(b))
    ]
    return rows, notes


def gap_decomposition(ra: Report, rb: Report, top: int = 5) -> list[GapCell]:
    """Where the vllm_kl gap lives: each (turn kind, bin) cell's K3 mass per token of its side,
    B minus A; the cells' contributions add up to vllm_kl(B) - vllm_kl(A)."""
    ta, tb = ra.whole().partial.tokens, rb.whole().partial.tokens  # type: ignore[union-attr]
    a = {tuple(g.by.values()): g.partial.k3_sum / ta for g in ra.split(*CROSS)}
    b = {tuple(g.by.values()): g.partial.k3_sum / tb for g in rb.split(*CROSS)}
    gap = sum(b.values()) - sum(a.values())
    cells = []
    for key in set(a) | set(b):
        contribution = b.get(key, 0.0) - a.get(key, 0.0)
        cells.append(GapCell(key[0], key[1], contribution, contribution / gap if gap else None))
    cells.sort(key=lambda c: -abs(c.contribution))
    return cells[:top]


def comparison_dict(c: Comparison) -> dict[str, Any]:
    """Both reports' JSON merged (a side in every group) with the ``comparison`` section."""
    sides = {"a": c.a.to_dict(), "b": c.b.to_dict()}
    out = {k: sides["a"][k] for k in ("schema_version", "tool", "aggregation", "bin_edges")}
    out["granularity"] = {**sides["a"]["granularity"], **sides["b"]["granularity"]}
    out["tails"] = sides["a"]["tails"]  # both sides are read with the same thresholds
    out["runs"] = {**sides["a"]["runs"], **sides["b"]["runs"]}
    out["excluded"] = {side: doc["excluded"] for side, doc in sides.items()}
    out["groups"] = [
        {**g, "by": {"side": side, **g["by"]}} for side, doc in sides.items() for g in doc["groups"]
    ]
    out["comparison"] = {
        "a": c.a.selection.label,
        "b": c.b.selection.label,
        "identical": False,  # `same.Identical` writes true
        "same_logprobs": c.same_logprobs,
        "config_diff": [asdict(r) for r in c.config],
        "headline": [r.to_dict() for r in c.headline],
        "gap": [asdict(g) for g in c.gap],
        "bins": [asdict(r) for r in c.bins],
        "turn_kind": [r.to_dict() for r in c.turn_kinds],
        "gpu": [r.to_dict() for r in c.gpus],
        "steps": [asdict(r) for r in c.steps],
        "by": {" x ".join(split): [r.to_dict() for r in rows] for split, rows in c.splits.items()},
        "hardware": {side: doc.get("hardware") for side, doc in sides.items()},
        "notes": c.notes,
        "curves": [pair_dict(p) for p in c.curves],
    }
    if c.pairing is not None:
        out["comparison"]["paired"] = c.pairing.to_dict()
    out["curves"] = {side: doc.get("curves", {}) for side, doc in sides.items()}
    if any("routing" in doc for doc in sides.values()):
        out["routing"] = {side: doc.get("routing", {}) for side, doc in sides.items()}
    return out
