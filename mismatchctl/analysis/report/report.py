"""Build a report: select, plan, run the engine, roll up, and derive shares, bands and the
per-hardware summary, all before the ``Report`` is made (it is frozen). Everything a writer
shows is computed here, in ``report/view.py`` (the sections) or in ``stats``; the ``Report``'s
fields, walked by ``analysis/json_form.py``, are the JSON of METRICS.md ("JSON shape")."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import numpy as np
import pyarrow as pa

from mismatchctl.analysis.bins import parse_edges
from mismatchctl.analysis.json_form import EMPTY, NONE, JsonForm, internal, member
from mismatchctl.analysis.report.figure_data import FigureData, FigureExtra, figure_data
from mismatchctl.analysis.routing.routing import RoutingResult, routing_extra, routing_results
from mismatchctl.analysis.selection import (
    empty_selection_error,
    removed_while_reading,
    reread,
    resolve_all,
)
from mismatchctl.curves.analysis import RunCurves, selection_curves
from mismatchctl.engines import plan as K
from mismatchctl.engines.choice import LOCAL_ENGINE, Engine
from mismatchctl.engines.local import PartExtra, Read
from mismatchctl.engines.plan import Selection, StepRange
from mismatchctl.engines.rollup import Groups, rollup, sort_key
from mismatchctl.engines.routing import RoutingExtra, RoutingState
from mismatchctl.engines.sequences import read_sequences
from mismatchctl.errors import StoreError, UsageError
from mismatchctl.parallel import DEFAULT_WORKERS
from mismatchctl.stats import (
    QUANTILE_METRICS,
    TOKEN_METRICS,
    Partial,
    band,
    shares,
    step_summary,
)
from mismatchctl.stats import registry as M
from mismatchctl.stats.positions import parse_position_bins
from mismatchctl.stats.tails import (
    DEFAULT_CLAMP,
    DEFAULT_IS_BOUNDS,
    DEFAULT_TAILS,
    DEFAULT_TAU,
    Tails,
    parse_bounds,
)
from mismatchctl.store import Store
from mismatchctl.version import __version__

if TYPE_CHECKING:
    from mismatchctl.analysis.worst.worst import Worst

AGGREGATION = "token-mean"
BIN_METRICS = (M.TOKENS, M.OVERFLOW_TOKENS, *TOKEN_METRICS, *QUANTILE_METRICS)
# Beyond the per-run splits, the whole selection by bin and by turn kind: the terminal tables.
SELECTION_SPLITS: list[K.Split] = [(K.TURN_KIND,), (K.BIN,)]


# The version of the JSON shape (METRICS.md "JSON shape"), not of the store: additions keep it;
# renaming or removing a key raises it.
REPORT_SCHEMA_VERSION = 1


Key = str | int | float | None  # a group's key in a split: a run, a step, a bin, a tag...
Metrics = dict[str, float | int | None]  # the registry's metrics of a group (None: undefined)
# An extra's mergeable state (``PartExtra``): each its own type, which who asked for it knows.
ExtraState = object


@dataclass(frozen=True)
class Group(JsonForm):
    """One group of a split: its keys (``by``), its mergeable state and its metrics (keyed by
    the registry's metrics), the severity band of its vllm_kl when it is a batch, and the
    metrics of its MoE routing in a ``--by`` split of a run with routes."""

    by: dict[str, Key]
    partial: Partial = internal()
    metrics: Metrics = member()
    band: str | None = member(omit=NONE, default=None)
    routing: Metrics | None = member(omit=NONE, default=None)


@dataclass(frozen=True)
class HardwareRow(JsonForm):
    """Per gpu (``report --by-gpu``): its runs and batches, the per-batch vllm_kl summary, the
    later/first ratio and the share of low-probability tokens. The fields are the registry's
    keys, in the order of the JSON."""

    gpu: str | None
    runs: list[str]
    batches: int
    tokens: int
    vllm_kl: float | None
    step_summary: dict[str, float | None] = member(flat=True)  # step median / p90 / max, bands
    later_first_vllm_kl_ratio: float | None = member()
    low_prob_token_share: float | None = member()

    @property
    def band(self) -> str | None:
        return band(self.vllm_kl)


@dataclass(frozen=True)
class RunEntry:
    """A run of the selection as the JSON's ``runs`` lists it."""

    tags: dict[str, str]
    tokens: int
    sequences: int
    steps: list[int]


def _flat_groups(groups: dict[K.Split, list[Group]]) -> list[Group]:
    """Every group, split after split (the report's groups are keyed in the order of its
    splits)."""
    return [g for split in groups.values() for g in split]


def _step_range(selection: Selection) -> str | None:
    return None if selection.steps is None else str(selection.steps)


@dataclass(frozen=True, kw_only=True)
class Report(JsonForm):
    """The report of a selection, built whole by ``report_on``. Its JSON (METRICS.md "JSON
    shape") is its fields in order (``analysis/json_form.py``); the ``internal()`` ones are
    for the sections and for the callers that read the extras of the same pass."""

    schema_version: int = member(default=REPORT_SCHEMA_VERSION)
    tool: str = member(default=f"mismatchctl {__version__}")
    aggregation: str = member(default=AGGREGATION)
    bin_edges: np.ndarray = member(form=lambda e: [float(x) for x in e])
    granularity: dict[str, str]  # what each metric is a mean over (``granularity``)
    # the edges of the position keys, the order blocks; the JSON writes the tails' thresholds
    binning: K.Binning = member(key="tails", form=lambda b: b.tails)
    runs: dict[str, RunEntry]
    excluded: dict[str, int]
    groups: dict[K.Split, list[Group]] = member(form=_flat_groups)  # in the order of splits
    selection: Selection = member(key="step_range", form=_step_range, omit=NONE)
    position_edges: list[int] | None = member(omit=NONE)  # with a position key in a split
    order_block: int | None = member(omit=NONE)  # with `order` in a split
    hardware: list[HardwareRow] | None = member(omit=NONE)
    curves: dict[str, RunCurves] = member(omit=EMPTY)  # per run, training curves
    notes: list[str] = member(omit=EMPTY)
    routing: dict[str, RoutingResult] = member(omit=EMPTY)  # per run with MoE routes
    splits: list[K.Split] = internal()
    extra_states: list[ExtraState] = internal()  # the state of each extra asked for, in order
    figures: dict[str, FigureData] | None = internal()  # per run: the HTML's densities, samples
    empty_by_run: dict[str, int] = internal()  # all-masked sequences per run
    worst: Worst | None = internal()  # with figures: the worst sequences and their tokens
    routing_layers: bool = internal()  # `--by layer`: the routing per MoE layer too
    routing_splits: list[K.Split] = internal()  # the --by splits with routing

    def split(self, *keys: str) -> list[Group]:
        return self.groups.get(K.canonical(list(keys)), [])

    def whole(self) -> Group | None:
        found = self.groups.get((), [])
        return found[0] if found else None

    def run(self, name: str) -> Group | None:
        """The whole-run group of one run of the selection."""
        return next((g for g in self.split(K.RUN) if g.by[K.RUN] == name), None)

    def to_polars(self) -> Any:
        """Every group as one row of a Polars frame: ``split`` (its keys joined by ``x``), one
        column per key of any split (null where the group has no such key), one per metric."""
        return groups_frame(g for split in self.splits for g in self.groups[split])


def granularity(splits: list[K.Split], groups: dict[K.Split, list[Group]]) -> dict[str, str]:
    """What each metric of the groups is a mean over (METRICS.md "aggregation"): a token mean
    (``token-mean``: every token weighs alike, what verl logs) and a mean of per-sequence
    (segment) means (``sequence-mean``: every sequence weighs alike) are different numbers."""
    out: dict[str, str] = {}
    for split in splits:
        for g in groups[split]:
            for key in g.metrics:
                if key not in out:
                    out[key] = M.granularity(M.by_key(key))
    return out


def groups_frame(groups: Any, **constant: Any) -> Any:
    """Groups as a Polars frame (``constant`` columns added to every row)."""
    import polars as pl

    rows = []
    for g in groups:
        row: dict[str, Any] = {**constant, "split": " x ".join(g.by) or "(whole)"}
        row.update({f"by_{k}": None if v is None else str(v) for k, v in g.by.items()})
        row.update({str(k): v for k, v in g.metrics.items()})
        if g.band is not None:
            row["band"] = g.band
        row.update(getattr(g, "routing", None) or {})
        rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)


def build_report(
    store: Store,
    runs: list[str] | None = None,
    *,
    bins: str = "log",
    by: list[K.Split] | None = None,
    by_gpu: bool = False,
    steps: StepRange | None = None,
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    figures: bool = False,
    engine: Engine = LOCAL_ENGINE,
    position_bins: str = "log2",
    tails: Tails = DEFAULT_TAILS,
    routing_layers: bool = False,
) -> Report:
    """The report of ``runs``: selectors (``v1``, ``v1@steps=0..200``, ``gpu=H20``) read as one
    slice (the runs they name, every run when none is, with the filters they share), and
    ``steps``; ``routing_layers``: the JSON's routing per MoE layer too (``--by layer``)."""
    return reread(
        lambda: report_on(
            resolve_all(store, runs or [], steps),
            bins=bins,
            by=by,
            by_gpu=by_gpu,
            workers=workers,
            on_part=on_part,
            figures=figures,
            engine=engine,
            binning=parse_binning(position_bins, tails),
            routing_layers=routing_layers,
        )
    )


def parse_binning(position_bins: str, tails: Tails = DEFAULT_TAILS) -> K.Binning:
    """The binning of ``--position-bins`` (``log2`` or integer edges from 0), with the
    thresholds of the tail-robust metrics (``parse_tails``)."""
    try:
        return K.Binning(parse_position_bins(position_bins), tails=tails)
    except ValueError as exc:
        raise UsageError(
            f"--position-bins: {exc}", "use log2, or edges such as 0,512,1024,4096."
        ) from None


def parse_tails(
    clamp: float = DEFAULT_CLAMP, tau: float = DEFAULT_TAU, is_bounds: str | None = None
) -> Tails:
    """The thresholds of ``--clamp``, ``--tau`` and ``--is-bounds`` (``LOWER_UPPER`` or one
    ``UPPER``, verl's grammar); a UsageError naming the option that is wrong."""
    try:
        bounds = DEFAULT_IS_BOUNDS if is_bounds is None else parse_bounds(is_bounds)
        Tails(is_lower=bounds[0], is_upper=bounds[1])
    except ValueError as exc:
        raise UsageError(
            f"--is-bounds: {exc}", "use LOWER_UPPER such as 0.5_2.0 or 0.8_1.25."
        ) from None
    for option, kw, hint in (
        ("--clamp", {"clamp": clamp}, "use a positive clamp of r, e.g. --clamp 10 (slime/miles)."),
        ("--tau", {"tau": tau}, "use a ratio above 1, e.g. --tau 2 (|r| > ln 2, AReaL)."),
    ):
        try:
            Tails(**kw)  # type: ignore[arg-type]
        except ValueError as exc:
            raise UsageError(f"{option}: {exc}", hint) from None
    return Tails(clamp, tau, *bounds)


class ReportOptions(TypedDict, total=False):
    """The keywords :func:`report_on` passes on to :func:`reports_on` (their defaults there)."""

    bins: str
    by: list[K.Split] | None
    by_gpu: bool
    workers: int
    on_part: Callable[[int], None] | None
    extras: Sequence[PartExtra]
    figures: bool
    engine: Engine
    binning: K.Binning
    routing_layers: bool


def report_on(selection: Selection, **options: Unpack[ReportOptions]) -> Report:
    """The report of an explicit selection (runs, or a slice of the store); ``extras`` are
    computed in the same read of every part and left in ``Report.extra_states``; ``figures``
    adds the densities and samples of the HTML page; ``engine`` says where parts are read;
    ``binning``: the edges of the position keys (``kv_position``...) and the order blocks;
    ``routing_layers``: the JSON's routing per MoE layer too.

    A selection without model tokens is an error (the same for every command); so is a run of
    it removed while it is read (RunRemovedError, which ``reread`` retries when the run was not
    named)."""
    (report,) = reports_on([selection], **options)
    return report


def reports_on(
    selections: Sequence[Selection],
    *,
    bins: str = "log",
    by: list[K.Split] | None = None,
    by_gpu: bool = False,
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    extras: Sequence[PartExtra] = (),
    figures: bool = False,
    engine: Engine = LOCAL_ENGINE,
    binning: K.Binning = K.DEFAULT_BINNING,
    on_read: Callable[[int, list[Any]], None] | None = None,
    routing_layers: bool = False,
) -> list[Report]:
    """:func:`report_on` of each selection, all read in one pass of the engine (the workers go
    from one selection's last parts to the next one's first without waiting); ``on_read(i,
    extra_states)`` is called as soon as selection ``i`` is read, while the next ones are
    (``extra_states`` begins with ``extras``' own). Each selection has its own extras
    (``extras`` are shared objects: they hold no state of their own). Each report is made
    whole as soon as its selection is read, while the workers read the next one's parts."""
    edges = parse_edges(bins)
    plans = [
        _plan(sel, edges, by, by_gpu, extras, figures, binning, routing_layers)
        for sel in selections
    ]
    finished: dict[int, Report] = {}

    def read_done(i: int, folded: tuple[list[Any], list[Any]]) -> None:
        if on_read is not None:  # first: what it starts runs beside the finishing below
            on_read(i, folded[1])
        finished[i] = plans[i].finish(folded)

    try:
        engine.reads_runner()([p.read for p in plans], workers, on_part, read_done)
        reports = [finished[i] for i in range(len(plans))]
    except (StoreError, OSError, pa.ArrowException):
        for sel in selections:
            removed = removed_while_reading(sel)
            if removed is not None:
                raise removed from None
        raise
    for report in reports:
        if report.whole() is None:
            raise empty_selection_error(report.selection)
    return reports


@dataclass(frozen=True)
class _Plan:
    """What one report reads (its engine ``Read``) and how its result is made of it."""

    selection: Selection
    read: Read
    wanted: list[K.Split]
    internal: list[K.Split]
    by_gpu: bool
    figure_extra: FigureExtra | None
    routing: RoutingExtra | None  # the routing extra, last of the read's extras
    routing_layers: bool

    def finish(self, folded: tuple[list[Any], list[Any]]) -> Report:
        return _finish(self, *folded)


def _plan(
    selection: Selection,
    edges: np.ndarray,
    by: list[K.Split] | None,
    by_gpu: bool,
    extras: Sequence[PartExtra],
    figures: bool,
    binning: K.Binning,
    routing_layers: bool,
) -> _Plan:
    figure_extra = FigureExtra() if figures else None
    if figure_extra is not None:
        from mismatchctl.analysis.worst.worst import WorstExtra

        extras = [*extras, WorstExtra(), figure_extra]
    wanted = list(dict.fromkeys([*K.default_splits(by_gpu), *SELECTION_SPLITS, *(by or [])]))
    check_attributes(selection, wanted)
    routing = routing_extra(selection, list(dict.fromkeys(by or [])), edges)
    if routing is not None:  # MoE routes: read beside the tokens, in the same pass
        extras = [*extras, routing]
    internal = [(K.RUN, K.GPU, K.STEP), (K.GPU, K.TURN_KIND)] if by_gpu else []
    passes = K.plan(wanted + internal)
    read = Read(selection.tasks, passes, edges, selection.rows, list(extras), binning)
    return _Plan(selection, read, wanted, internal, by_gpu, figure_extra, routing, routing_layers)


def _finish(plan: _Plan, finest: list[Any], extra_states: list[Any]) -> Report:
    """The report of one selection from what the engine folded of its parts, made whole."""
    selection, routing = plan.selection, plan.routing
    passes, edges, binning = plan.read.passes, plan.read.edges, plan.read.binning
    routing_state = None
    if routing is not None:
        routing_state, extra_states = extra_states[-1], extra_states[:-1]
    rolled = {}
    for split in plan.wanted + plan.internal:
        p = K.pass_for(split, passes)
        rolled[split] = rollup(split, p, finest[passes.index(p)])
    runs_routing = routing_results(selection, routing_state, edges, plan.routing_layers)
    routed = _routed_groups(routing, routing_state) if runs_routing else {}
    groups = {s: _groups(s, rolled[s], binning.tails, routed.get(s)) for s in plan.wanted}
    sequences = read_sequences(selection)  # each sequence file once: counts and step means
    empty = {run: found.empty for run, found in sequences.items()}
    figures, worst = None, None
    if plan.figure_extra is not None:
        from mismatchctl.analysis.worst.worst import worst_sequences

        figures = figure_data(extra_states[-1], plan.figure_extra)
        worst = worst_sequences(selection, extra_states[-2])
    splits = plan.wanted
    return Report(
        bin_edges=edges,
        granularity=granularity(splits, groups),
        binning=binning,
        runs=_runs(selection, groups),
        excluded=_excluded(selection, empty),
        groups=groups,
        selection=selection,
        position_edges=(
            list(binning.positions)
            if any(k in K.POSITION_KEYS for split in splits for k in split)
            else None
        ),
        order_block=binning.order_block if any(K.DUMP_ORDER in s for s in splits) else None,
        hardware=_hardware(rolled) if plan.by_gpu else None,
        curves=selection_curves(selection, groups.get((K.RUN, K.STEP), []), sequences),
        notes=prompt_length_notes(selection, splits),
        routing=runs_routing,
        splits=splits,
        extra_states=extra_states,
        figures=figures,
        empty_by_run=empty,
        worst=worst,
        routing_layers=plan.routing_layers,
        routing_splits=routing.splits if routing is not None and runs_routing else [],
    )


def _routed_groups(
    routing: RoutingExtra | None, state: RoutingState | None
) -> dict[K.Split, dict[tuple[Key, ...], Metrics]]:
    """Per ``--by`` split with routing, the routing metrics of each of its groups."""
    if routing is None or state is None:
        return {}
    return {
        split: {key: sums.metrics() for key, sums in found.items()}
        for split, found in zip(routing.splits, state.groups, strict=True)
    }


def _runs(selection: Selection, groups: dict[K.Split, list[Group]]) -> dict[str, RunEntry]:
    """Each run of the selection: its tags, tokens, sequences and steps."""
    steps: dict[Key, list[Key]] = {}
    for g in groups.get(K.canonical([K.RUN, K.STEP]), []):
        steps.setdefault(g.by[K.RUN], []).append(g.by[K.STEP])
    whole: dict[Key, Metrics] = {}
    for g in groups.get((K.RUN,), []):
        whole.setdefault(g.by[K.RUN], g.metrics)
    out = {}
    for r in selection.runs:
        metrics = whole.get(r.name, {})
        out[r.name] = RunEntry(
            tags=r.tags,
            tokens=metrics.get(M.TOKENS, 0),  # type: ignore[arg-type]
            sequences=metrics.get(M.SEQUENCES, 0),  # type: ignore[arg-type]
            steps=steps.get(r.name, []),  # type: ignore[arg-type]
        )
    return out


def check_attributes(selection: Selection, splits: list[K.Split]) -> None:
    """Every ``attr:NAME`` of the splits is an attribute of some source of the selection."""
    kept = sorted({a for r in selection.runs for s in r.sources for a in (s.attributes or {})})
    for split in splits:
        for key in split:
            name = key[len(K.ATTR_PREFIX) :]
            if key.startswith(K.ATTR_PREFIX) and name not in kept:
                raise UsageError(
                    f"--by {key}: no source of {', '.join(selection.names)} has the attribute "
                    f"`{name}` (attributes: {', '.join(kept) or 'none'})",
                    "`mismatchctl runs show RUN` lists a run's attributes; re-ingest with "
                    f"--attr {name} to keep a column ingest left out.",
                )


def prompt_length_notes(selection: Selection, splits: list[K.Split]) -> list[str]:
    """A note per run of a ``kv_position`` split with sequences of unknown prompt length: their
    KV position is their position in the response (the prompt not counted)."""
    if not any(K.KV_POSITION in split for split in splits):
        return []
    notes = []
    for run in selection.runs:
        known = sum(s.prompt_lengths or 0 for s in run.sources)
        total = sum(s.sequences for s in run.sources)
        if known < total:
            notes.append(
                f"kv_position of run `{run.name}`: {total - known:,} of {total:,} sequences have "
                "no prompt length (the dump did not give one, or the run was ingested before "
                "prompt lengths were kept): their kv_position counts from the first position of "
                "the response"
            )
    return notes


def _groups(
    split: K.Split,
    rolled: Groups,
    tails: Tails = DEFAULT_TAILS,
    routed: dict[tuple[Key, ...], Metrics] | None = None,
) -> list[Group]:
    """Finalized groups of one split; groups of token keys (probability bin, KV position, turn
    position) carry token metrics, shares and quantiles only (a sequence cut by tokens is not a
    meaningful unit); ``routed``: the routing metrics of its groups, by key."""
    parents: Groups = {}
    token = K.token_keys(split)
    if token:
        parent_split = tuple(k for k in split if k not in token)
        parents = rollup(parent_split, K.Pass(token, split), rolled)
    out = []
    for key in sorted(rolled, key=sort_key):
        partial = rolled[key]
        by = dict(zip(split, key, strict=True))
        metrics = partial.finalize(tails)
        if token:
            metrics = {k: v for k, v in metrics.items() if k in BIN_METRICS or M.is_extreme_frac(k)}
            parent = parents[tuple(v for k, v in by.items() if k not in token)]
            metrics.update(shares(partial, parent))
        group_band = band(metrics.get(M.VLLM_KL)) if K.STEP in split else None
        found = (routed or {}).get(tuple(by[k] for k in split))
        out.append(Group(by, partial, metrics, group_band, found))
    return out


def _excluded(selection: Selection, empty: dict[str, int]) -> dict[str, int]:
    dropped = sum(r.dropped_sequences for r in selection.runs)
    return {"empty_sequences": sum(empty.values()), "dropped_sequences": dropped}


def _hardware(rolled: dict[K.Split, Groups]) -> list[HardwareRow]:
    """Per gpu: runs, batches, tokens, vllm_kl, the per-batch series summary, later/first ratio,
    and the share of tokens with p_infer < 1e-3."""
    per_gpu = rolled[(K.GPU,)]
    batches = rolled[(K.RUN, K.GPU, K.STEP)]
    kinds = rolled[(K.GPU, K.TURN_KIND)]
    rows = []
    for (gpu,) in sorted(per_gpu, key=sort_key):
        partial = per_gpu[(gpu,)]
        series = {(r, s): p for (r, g, s), p in batches.items() if g == gpu}
        first, later = kinds.get((gpu, "first")), kinds.get((gpu, "later"))
        rows.append(
            HardwareRow(
                gpu=gpu,
                runs=sorted({r for r, _ in series}),
                batches=len(series),
                tokens=partial.tokens,
                vllm_kl=partial.finalize()[M.VLLM_KL],
                step_summary=step_summary(p.finalize()[M.VLLM_KL] for p in series.values()),
                later_first_vllm_kl_ratio=_ratio(later, first),
                low_prob_token_share=(
                    partial.low_prob_tokens / partial.tokens if partial.tokens else None
                ),
            )
        )
    return rows


def _ratio(later: Partial | None, first: Partial | None) -> float | None:
    if later is None or first is None:
        return None
    a, b = later.finalize()[M.VLLM_KL], first.finalize()[M.VLLM_KL]
    if a is None or b is None or b == 0 or math.isinf(b):
        return None
    return a / b
