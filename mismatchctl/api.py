"""The verbs the CLI calls. They return objects (results with ``to_dict()`` and ``to_polars()``,
shown by ``sections(result)``); they never print and never exit."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from mismatchctl.errors import UsageError
from mismatchctl.options import (
    DEFAULT_CLAMP,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    DEFAULT_SETTLE,
    DEFAULT_TAU,
    DEMO_STORE,
    FORMATS,
    IngestOptions,
)
from mismatchctl.options import KEYS_HELP as SPLIT_KEYS
from mismatchctl.parallel import DEFAULT_WORKERS

if TYPE_CHECKING:
    from mismatchctl.analysis import catalog_view as views
    from mismatchctl.analysis.bisect.judge import Bisect
    from mismatchctl.analysis.certify.certify import Certification
    from mismatchctl.analysis.check.check import Gate, Threshold
    from mismatchctl.analysis.check.metrics import gated_metrics
    from mismatchctl.analysis.compare.compare import Comparison
    from mismatchctl.analysis.compare.same import Identical
    from mismatchctl.analysis.diagnose import Diagnosis
    from mismatchctl.analysis.diagnosed_report import DiagnosedReport
    from mismatchctl.analysis.explain import Explain
    from mismatchctl.analysis.live import StepLine
    from mismatchctl.analysis.report.report import Report
    from mismatchctl.analysis.sections import Section
    from mismatchctl.analysis.show.show import Show
    from mismatchctl.analysis.tokens.tokens import Tokens
    from mismatchctl.analysis.warm import Warmed
    from mismatchctl.analysis.watch import FileNote, Started, Stopped, Watcher
    from mismatchctl.analysis.whatif.preset import PresetList, PresetWhatif
    from mismatchctl.analysis.whatif.whatif import Whatif
    from mismatchctl.curves.ingest import MetricsIngest
    from mismatchctl.ingest.routing_rows import RouteOptions  # noqa: F401 (api.RouteOptions)
    from mismatchctl.ingest.run_ingest import IngestResult, Progress
    from mismatchctl.sample_runs import Compile, DemoRun
    from mismatchctl.store import RunInfo, Store, open_store
    from mismatchctl.store.integrity import Damage
    from mismatchctl.store.location import point_at

# What the api re-exports, loaded on first use (PEP 562) like the modules each verb imports in
# its body: importing the api (the command line does, for `--help`) loads no engine, kernel,
# pyarrow or plotting library.
_LAZY = {
    "views": ("mismatchctl.analysis.catalog_view", None),
    "Certification": ("mismatchctl.analysis.certify.certify", "Certification"),
    "Comparison": ("mismatchctl.analysis.compare.compare", "Comparison"),
    "Identical": ("mismatchctl.analysis.compare.same", "Identical"),
    "Diagnosis": ("mismatchctl.analysis.diagnose", "Diagnosis"),
    "DiagnosedReport": ("mismatchctl.analysis.diagnosed_report", "DiagnosedReport"),
    "Explain": ("mismatchctl.analysis.explain", "Explain"),
    "Gate": ("mismatchctl.analysis.check.check", "Gate"),
    "gated_metrics": ("mismatchctl.analysis.check.metrics", "gated_metrics"),
    "StepLine": ("mismatchctl.analysis.live", "StepLine"),
    "Report": ("mismatchctl.analysis.report.report", "Report"),
    "Show": ("mismatchctl.analysis.show.show", "Show"),
    "Tokens": ("mismatchctl.analysis.tokens.tokens", "Tokens"),
    "FileNote": ("mismatchctl.analysis.watch", "FileNote"),
    "Started": ("mismatchctl.analysis.watch", "Started"),
    "Stopped": ("mismatchctl.analysis.watch", "Stopped"),
    "Watcher": ("mismatchctl.analysis.watch", "Watcher"),
    "Warmed": ("mismatchctl.analysis.warm", "Warmed"),
    "Whatif": ("mismatchctl.analysis.whatif.whatif", "Whatif"),
    "PresetList": ("mismatchctl.analysis.whatif.preset", "PresetList"),
    "PresetWhatif": ("mismatchctl.analysis.whatif.preset", "PresetWhatif"),
    "MetricsIngest": ("mismatchctl.curves.ingest", "MetricsIngest"),
    "RouteOptions": ("mismatchctl.ingest.routing_rows", "RouteOptions"),
    "IngestResult": ("mismatchctl.ingest.run_ingest", "IngestResult"),
    "Compile": ("mismatchctl.sample_runs", "Compile"),
    "DemoRun": ("mismatchctl.sample_runs", "DemoRun"),
    "RunInfo": ("mismatchctl.store", "RunInfo"),
    "Store": ("mismatchctl.store", "Store"),
    "open_store": ("mismatchctl.store", "open_store"),
    "point_at": ("mismatchctl.store.location", "point_at"),
}


def _items(value: str | Path | Iterable[Any] | None) -> list[Any]:
    """Names given as one string (or path) or as several: one string is one item, never its
    characters (``report("ref")`` is ``report(["ref"])``)."""
    if value is None:
        return []
    if isinstance(value, str | Path):
        return [value]
    return list(value)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'mismatchctl.api' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


StorePath = str | os.PathLike[str] | None


def sections(result: object, *, pool: bool = False, brief: bool = False) -> list[Section]:
    """What the terminal and the HTML page show of a result (``report``, ``compare``,
    ``diagnose``, ``whatif``, ``check``, ``certify``, ``tokens``, ``show``, ``explain``,
    ``bisect``): its view's sections. ``pool``: a report's distributions of every run together
    rather than per run; ``brief``: a diagnosis's verdict and what fails or warns only."""
    from mismatchctl.analysis import result_sections

    return result_sections.sections(result, pool=pool, brief=brief)


def ingest(
    inputs: Iterable[str | Path],
    run: str,
    *,
    options: IngestOptions | None = None,
    store: StorePath = None,
    progress: Progress | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    workers: int = DEFAULT_WORKERS,
    **reading: Any,
) -> IngestResult:
    """Read dump files into ``run`` of the store: all of them, or nothing on any error.

    How the files are read is ``options`` (an ``IngestOptions``); each of its fields may also be
    given as a keyword (``tags=``, ``fmt=``, ``mapping=``, ``skip_bad=``, ``trust_pickle=``,
    ``allow_padding=``, ``attrs=``, ``keep_masked=``, ``routes_aligned=``, ``routes_topk=``,
    ``num_experts=``, ``keep_routes=``; the four route options also as ``routes=RouteOptions``),
    which replaces that field of ``options``.

    Routed experts (MoE) on both sides are compared per token and stored beside the token rows
    (``docs/store.md``); the route options say how to pair them with the logprobs (``aligned``),
    the top-k of encodings without it, the number of experts to check ids against, and whether
    to keep the full routes.

    ``keep_masked`` keeps the token ids of the masked positions inside each sequence (its tool
    responses), when the dump has token ids, so that ``show`` writes them as text.

    Each sequence's prompt length is kept when the dump has it (``kv_position`` counts from
    it), and its per-sequence scalar columns of few values (``data_source``, ``env``...) as
    attributes (``attr:NAME`` split keys); ``attrs`` names columns to keep whatever their
    number of values (a column the file does not have is an error).

    A dump without a mask whose sequences end in padding (runs of exact 0.0 on both sides) is
    refused; ``allow_padding=True`` keeps those positions as model tokens (counted in
    ``tally.padding_kept`` and noted in the provenance).

    ``trust_pickle=True`` loads torch ``.pt`` files with full unpickling, which runs any code
    the file contains: only for files from a source you trust. By default they are loaded with
    ``weights_only=True`` and a file that needs more is refused.
    It also lets verl ``DataProto.save_to_disk`` pickles be read, by a restricted unpickler that
    rebuilds numpy arrays and torch tensors only; without it they are refused.

    ``engine="ray"`` reads the files in parallel Ray tasks (a local Ray with ``workers`` CPUs, or
    the cluster at ``ray_address``; the store must be on a filesystem every node sees); the
    rows stored are those of a local ingest. Inputs may be ``s3://`` or ``gs://`` URIs (objects,
    prefixes or globs; credentials from the environment): each object is copied to a local
    temporary file by the task that reads it (``workers`` threads with the local engine)."""
    from mismatchctl.engines.choice import choose_engine
    from mismatchctl.ingest.remote_inputs import is_remote
    from mismatchctl.ingest.run_ingest import ingest_files, options_of
    from mismatchctl.store import open_store

    eng = choose_engine(engine, ray_address)
    opts = options_of(run, _reading("ingest", options, reading))
    files = [str(i) for i in _items(inputs)]
    if eng.is_ray or any(is_remote(f) for f in files):
        from mismatchctl.ingest import staged

        tasks = (
            staged.ray_tasks(eng.address, workers) if eng.is_ray else staged.thread_tasks(workers)
        )
        return staged.ingest_staged(open_store(store), files, opts, tasks, progress)
    return ingest_files(open_store(store), files, opts, progress)


def watch(
    directory: str | Path,
    run: str,
    *,
    options: IngestOptions | None = None,
    store: StorePath = None,
    poll: float | None = None,
    settle: float = DEFAULT_SETTLE,
    once: bool = False,
    max_files: int | None = None,
    idle_exit: float | None = None,
    explain: bool = True,
    warm: bool = False,
    **reading: Any,
) -> Watcher:
    """A watcher of ``directory``: ``Watcher.events()`` ingests each dump file into ``run`` once
    it is complete (one transaction per file, read as ``options`` and the reading keywords say,
    as for :func:`ingest`) and yields a ``StepLine`` per new step (tokens, vllm_kl, band, change
    against the recent median, alerts), a ``FileNote`` per file not ingested as it is (bad or
    unreadable, a copy, changed after ingest, removed while read, grown after ingest and so
    ingested again whole) and ``Stopped``. ``poll``: scan every ``poll`` seconds instead of
    waiting for file events; ``once``: one scan; ``max_files`` / ``idle_exit``: stop after that
    many files or idle seconds; ``warm``: after a scan that ingested files, the run read for
    ``report``, ``explain`` and ``diagnose`` into the part cache, as ``ingest --warm`` does (a
    ``Warmed`` event)."""
    from mismatchctl.analysis.watch import Watcher, WatchOptions
    from mismatchctl.ingest.run_ingest import options_of
    from mismatchctl.store import open_store
    from mismatchctl.store.store import check_run_name

    given = _reading("watch", options, reading)
    check_run_name(run)
    wopts = WatchOptions(
        str(directory), options_of(run, given), poll=poll, settle=settle, once=once,
        max_files=max_files, idle_exit=idle_exit, explain=explain, warm=warm,
    )  # fmt: skip
    return Watcher(open_store(store), wopts)


def _reading(verb: str, options: IngestOptions | None, given: dict[str, Any]) -> IngestOptions:
    """``options`` with the reading options given as keywords in place of its fields (the
    keywords of :func:`ingest` before ``IngestOptions``, ``routes=RouteOptions(...)`` among
    them); an unknown keyword is a TypeError, as Python's own."""
    routes = given.pop("routes", None)
    if routes is not None:
        given |= {"routes_aligned": routes.aligned, "routes_topk": routes.top_k,
                  "num_experts": routes.num_experts, "keep_routes": routes.keep_routes}  # fmt: skip
    unknown = sorted(set(given) - {f.name for f in fields(IngestOptions)})
    if unknown:
        raise TypeError(f"{verb}() got an unexpected keyword argument {unknown[0]!r}")
    return replace(options or IngestOptions(), **given)


def ingest_metrics(
    path: str | Path,
    run: str,
    *,
    metrics: Iterable[str] = (),
    step_column: str | None = None,
    fmt: str | None = None,
    replace: bool = False,
    store: StorePath = None,
) -> MetricsIngest:
    """Attach a training log (W&B CSV, JSON lines, TensorBoard) to ``run``: its per-step
    metrics, selected or renamed by ``metrics`` (``["grad_norm=actor/grad_norm", "critic/*"]``)."""
    from mismatchctl.curves.ingest import ingest_metrics as ingest_metrics_file
    from mismatchctl.store import open_store

    run = _whole_run(run, "ingest-metrics")
    return ingest_metrics_file(
        open_store(store),
        path,
        run,
        fmt=fmt,
        step_column=step_column,
        metrics=_items(metrics),
        replace=replace,
    )


def runs(store: StorePath = None) -> list[RunInfo]:
    from mismatchctl.store import open_store

    return open_store(store).runs()


def run_info(name: str, store: StorePath = None, *, command: str = "runs show") -> RunInfo:
    """A run's tags and provenance (``name``: a run; a selector of part of one is refused, in
    the words of ``command``: ``runs show`` or ``runs rm``)."""
    from mismatchctl.store import open_store

    return open_store(store).run(_whole_run(name, command))


def selected_runs(selectors: Iterable[str] = (), store: StorePath = None) -> list[RunInfo]:
    """The runs that ``report``'s selectors read (every run when none names one), checked as
    the report checks them (an unknown run is an error naming the closest), without reading
    their data."""
    from mismatchctl.analysis.selection import named_runs
    from mismatchctl.store import open_store

    return named_runs(open_store(store), _items(selectors))


def remove_run(name: str, store: StorePath = None) -> RunInfo:
    from mismatchctl.store import open_store

    return open_store(store).remove(_whole_run(name, "runs rm"))


_WHOLE = {
    "bisect": "name the run alone and narrow the steps with --steps A..B: mismatchctl bisect "
    "{run} --model DIR --steps A..B.",
    "runs show": "name the run alone: mismatchctl runs show {run}; report, compare, explain, "
    "diagnose and the other analysis commands take RUN@steps=A..B.",
    "runs rm": "runs rm removes a whole run: name it alone (mismatchctl runs rm {run}); steps "
    "of a run are not removed one by one.",
    "runs check": "name the run alone: mismatchctl runs check {run} checks every part of it.",
    "show": "name the run alone and narrow the sequences by step with --step: mismatchctl show "
    "{run} SAMPLE_ID --step N.",
    "ingest-metrics": "name the run alone: a training log's steps are joined to every step of "
    "the run (mismatchctl ingest-metrics LOG --run {run}).",
}


def _whole_run(name: str, command: str) -> str:
    """``name`` when it is a run; a selector of part of one is refused, naming the run."""
    if not any(c in name for c in "@=,"):  # a run name (the grammar loads the engine's plan)
        return name
    from mismatchctl.analysis.selectors import whole_run

    return whole_run(name, command, _WHOLE[command])


def check_runs(
    names: Iterable[str] = (), *, deep: bool = False, store: StorePath = None
) -> dict[str, list[Damage]]:
    """Every part of the named runs (all runs when none is named) checked against the catalog:
    run -> its damaged parts (missing, truncated, wrong row count; ``deep`` decodes every page)."""
    from mismatchctl.store import open_store
    from mismatchctl.store.integrity import run_damage

    st = open_store(store)
    named = [_whole_run(n, "runs check") for n in _items(names)]
    return {name: run_damage(st, name, deep) for name in (named or st.run_names())}


def report(
    runs: Iterable[str] | None = None,
    *,
    bins: str = "log",
    by: Iterable[str] = (),
    by_gpu: bool = False,
    steps: str | None = None,
    workers: int = DEFAULT_WORKERS,
    store: StorePath = None,
    on_part: Callable[[int], None] | None = None,
    figures: bool = False,
    engine: str = "local",
    ray_address: str | None = None,
    diagnose: bool = False,
    position_bins: str = "log2",
    clamp: float = DEFAULT_CLAMP,
    tau: float = DEFAULT_TAU,
    is_bounds: str | None = None,
    on_diagnosis: Callable[[str, int, int], None] | None = None,
) -> Report | DiagnosedReport:
    """Every metric of the selected runs (all runs when none is named), grouped by the default
    splits plus each ``by`` split (``"step"``, ``"step,turn_kind"``, ``"tag:engine"``,
    ``"kv_position"``, ``"attr:data_source"``...); ``position_bins``: the edges of
    ``kv_position``, ``turn_position`` and ``length`` (``"log2"`` or ``"0,512,1024"``).
    ``figures=True`` also computes the figure data of the HTML report (``Report.figures``).
    ``engine="ray"`` reads the parts in Ray tasks (a local Ray with ``workers`` CPUs, or the
    cluster at ``ray_address``); the numbers are the same as with ``"local"``. ``diagnose``
    also runs ``diagnose`` on each run and returns both, composed: a ``DiagnosedReport``
    (``.report``, ``.diagnoses`` per run). ``clamp``, ``tau`` and
    ``is_bounds`` (``"0.5_2.0"``) set the thresholds of ``vllm_kl_clamped``,
    ``extreme_frac_tau{tau}`` and ``is_oob_ratio``. ``"layer"`` among ``by`` adds the MoE
    routing per layer of runs with routes. ``on_diagnosis(run, index, total)`` is called as
    each run's diagnosis starts."""
    from mismatchctl.analysis.report.report import build_report, parse_tails
    from mismatchctl.analysis.selectors import parse_steps, selector_text
    from mismatchctl.engines.choice import choose_engine
    from mismatchctl.engines.plan import parse_by
    from mismatchctl.options import ROUTING_LAYER
    from mismatchctl.store import open_store

    eng = choose_engine(engine, ray_address)
    tails = parse_tails(clamp, tau, is_bounds)
    by = _items(by)
    rep = build_report(
        open_store(store),
        _items(runs),
        bins=bins,
        by=parse_by([b for b in by if b.strip() != ROUTING_LAYER]),
        by_gpu=by_gpu,
        steps=parse_steps(steps),
        workers=workers,
        on_part=on_part,
        figures=figures,
        engine=eng,
        position_bins=position_bins,
        tails=tails,
        routing_layers=any(b.strip() == ROUTING_LAYER for b in by),
    )
    if diagnose:  # one diagnosis per run, of the same slice of it
        from mismatchctl.analysis.diagnose import build_diagnosis
        from mismatchctl.analysis.diagnosed_report import DiagnosedReport

        sel = rep.selection
        diagnoses = {}
        for i, n in enumerate(sel.names):
            if on_diagnosis is not None:
                on_diagnosis(n, i, len(sel.names))
            diagnoses[n] = build_diagnosis(
                open_store(store),
                selector_text(n, gpu=sel.rows.gpu, tags=sel.tags, steps=sel.steps),
                workers=workers,
                engine=eng,
            )
        return DiagnosedReport(rep, diagnoses)
    return rep


def compare(
    a: str,
    b: str,
    *,
    bins: str = "log",
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    workers: int = DEFAULT_WORKERS,
    store: StorePath = None,
    on_part: Callable[[int], None] | None = None,
    figures: bool = False,
    engine: str = "local",
    ray_address: str | None = None,
    by: Iterable[str] = (),
    position_bins: str = "log2",
    clamp: float = DEFAULT_CLAMP,
    tau: float = DEFAULT_TAU,
    is_bounds: str | None = None,
) -> Comparison | Identical:
    """Two selectors (``"v0-ref"``, ``"gpu=H20"``, ``"v1@steps=0..200"``) side by side; each
    ``by`` split (``"kv_position"``, ``"attr:data_source"``) side by side too; ``clamp``,
    ``tau``, ``is_bounds``: the tail-robust thresholds, as for ``report``. When both sides hold
    the same responses, ``Comparison.pairing`` is the paired comparison (else why not). Two
    sides that hold the same data (the same model tokens and logprobs, and routes) give an
    :class:`Identical` instead: no difference, and what both hold."""
    from mismatchctl.analysis.compare.compare import build_comparison
    from mismatchctl.analysis.report.report import parse_tails
    from mismatchctl.engines.choice import choose_engine
    from mismatchctl.engines.plan import parse_by
    from mismatchctl.store import open_store

    eng = choose_engine(engine, ray_address)
    tails = parse_tails(clamp, tau, is_bounds)
    return build_comparison(
        open_store(store),
        a,
        b,
        bins=bins,
        resamples=resamples,
        seed=seed,
        workers=workers,
        on_part=on_part,
        figures=figures,
        engine=eng,
        by=parse_by(_items(by)),
        position_bins=position_bins,
        tails=tails,
    )


def explain(
    target: str,
    baseline: str | None = None,
    *,
    bins: str = "log",
    bootstrap: bool = True,
    workers: int = DEFAULT_WORKERS,
    store: StorePath = None,
    on_part: Callable[[int], None] | None = None,
    engine: str = "local",
    ray_address: str | None = None,
) -> Explain:
    """Where the mismatch of ``target`` (a selector) lives: against ``baseline`` (a run, a slice,
    the same run's earlier steps ``run@steps=0..50``), the excess over what the baseline's rates
    predict; without one, where the K3 mass concentrates at the same token probabilities.
    ``bootstrap``: the findings' sequence-bootstrap intervals (from the cells the cube's read
    keeps: one read either way)."""
    from mismatchctl.analysis.explain import build_explain
    from mismatchctl.engines.choice import choose_engine
    from mismatchctl.store import open_store

    eng = choose_engine(engine, ray_address)
    return build_explain(
        open_store(store), target, baseline, bins=bins, workers=workers, on_part=on_part,
        engine=eng, bootstrap_intervals=bootstrap,
    )  # fmt: skip


def tokens(
    selector: str,
    *,
    top: int = 20,
    sort: str = "k3",
    sequences: bool = False,
    where: Iterable[str] = (),
    context: int = 5,
    tokenizer: str | None = None,
    bins: str = "log",
    workers: int = DEFAULT_WORKERS,
    store: StorePath = None,
    on_part: Callable[[int], None] | None = None,
    engine: str = "local",
    ray_address: str | None = None,
) -> Tokens:
    """The ``top`` worst tokens of a selector (``sort``: ``k3``, ``abs-r``, ``prob-diff``), or
    with ``sequences`` the worst sequences (``k3``, ``chi2``, ``abs-sum-r``), in the cell of
    every ``where`` (``"bin=0.001-0.01"``, ``"turn_kind=later"``, any split key); each token
    with ``context`` model tokens either side. Exact: ties by run, step, seq, position.
    ``tokenizer``: a tokenizer.json, a tokenizer directory or ``"bytes"``, remembered for the
    selection's runs (later calls decode with it)."""
    from mismatchctl.analysis.tokens.tokens import build_tokens
    from mismatchctl.engines.choice import choose_engine
    from mismatchctl.store import open_store

    eng = choose_engine(engine, ray_address)
    where = _items(where)
    return build_tokens(
        open_store(store), selector, top=top, sort=sort, sequences=sequences, where=where,
        context=context, tokenizer=tokenizer, bins=bins, workers=workers, on_part=on_part,
        engine=eng,
    )  # fmt: skip


def show(
    run: str,
    sample_id: str,
    *,
    step: int | None = None,
    index: int | None = None,
    tokenizer: str | None = None,
    store: StorePath = None,
) -> Show:
    """One sequence of ``run`` by its sample id, token by token (``step`` narrows, ``index``
    picks among sequences sharing the id); ``tokenizer`` as in :func:`tokens` (remembered)."""
    from mismatchctl.analysis.show.show import build_show
    from mismatchctl.store import open_store

    run = _whole_run(run, "show")
    return build_show(
        open_store(store), run, sample_id, step=step, index=index, tokenizer=tokenizer
    )


def bisect(
    run: str,
    model: str,
    *,
    sample: int = 200,
    steps: str | None = None,
    device: str = "cpu",
    settings: list[str] | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    start: str = "fp32",
    prefill_chunk: int = 512,
    cells: Sequence[str] = (),
    seed: int = 0,
    store: StorePath = None,
    on_plan: Callable[[str], None] | None = None,
    on_pass: Callable[[str, int, int], None] | None = None,
) -> Bisect:
    """Which component makes ``run``'s mismatch: ``sample`` of its sequences (within ``steps``,
    ``A..B``; stratified by the hot cells explain finds there, or by ``cells``, ``KEY=VALUE``
    conditions of one cell, plus a control sample from the rest; seeded) re-scored with
    ``model`` (a local checkpoint directory or a ``module:function`` factory) under each of
    ``settings`` (all by default), each one change from ``start`` (``fp32`` or ``bf16``: the
    trainer's precision), against both sides (docs/bisect.md). ``on_plan`` hears the hot cells
    and the work before it starts, ``on_pass`` each sequence re-scored as (setting, done,
    total). Needs torch (and transformers for a checkpoint directory)."""
    from mismatchctl.analysis.bisect.build import build_bisect
    from mismatchctl.analysis.selectors import parse_steps
    from mismatchctl.store import open_store

    run = _whole_run(run, "bisect")
    return build_bisect(
        open_store(store), run, model, sample=sample, steps=parse_steps(steps), device=device,
        names=settings, temperature=temperature, top_p=top_p, top_k=top_k, start=start,
        prefill_chunk=prefill_chunk, cells=cells, seed=seed, on_plan=on_plan, on_pass=on_pass,
    )  # fmt: skip


def certify(
    selector: str,
    *,
    tolerance: float = 0.0,
    workers: int = DEFAULT_WORKERS,
    store: StorePath = None,
    on_part: Callable[[int], None] | None = None,
    engine: str = "local",
    ray_address: str | None = None,
) -> Certification:
    """Whether every token of ``selector`` has equal logprobs on both sides (``tolerance`` 0:
    bitwise; else ``|r| <= tolerance``): ``Certification.holds``, the shares, and where the
    sequences first diverge."""
    from mismatchctl.analysis.certify.certify import build_certification
    from mismatchctl.engines.choice import choose_engine
    from mismatchctl.store import open_store

    eng = choose_engine(engine, ray_address)
    return build_certification(
        open_store(store), selector, tolerance=tolerance, workers=workers, on_part=on_part,
        engine=eng,
    )  # fmt: skip


def diagnose(
    selector: str,
    *,
    baseline: str | None = None,
    workers: int = DEFAULT_WORKERS,
    store: StorePath = None,
    on_part: Callable[[int], None] | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    tokenizer: str | None = None,
) -> Diagnosis:
    """Every check of ``diagnose`` on a selector (``"v1-a100"``, ``"gpu=A100"``,
    ``"v1@steps=0..200"``): ``Diagnosis.checks`` with verdicts ok / warn / fail / n/a;
    ``baseline``: a known-good selector every relative check also judges against;
    ``tokenizer``: as in :func:`tokens` (remembered for the runs; the token-class check reads
    the worst tokens' text with it)."""
    from mismatchctl.analysis.diagnose import build_diagnosis
    from mismatchctl.engines.choice import choose_engine
    from mismatchctl.store import open_store

    eng = choose_engine(engine, ray_address)
    return build_diagnosis(
        open_store(store), selector, baseline=baseline, workers=workers, on_part=on_part,
        engine=eng, tokenizer=tokenizer,
    )  # fmt: skip


def warm(
    run: str,
    *,
    workers: int = DEFAULT_WORKERS,
    store: StorePath = None,
    on_part: Callable[[int], None] | None = None,
    engine: str = "local",
    ray_address: str | None = None,
) -> Warmed:
    """Read ``run`` once for ``report``, ``explain`` and ``diagnose`` as each reads it by
    default, so that the part cache holds their states and those views then read states
    instead of tokens (``ingest --warm``); nothing when the cache is off."""
    from mismatchctl.analysis.warm import warm as warm_run
    from mismatchctl.engines.choice import choose_engine
    from mismatchctl.store import open_store

    eng = choose_engine(engine, ray_address)
    return warm_run(open_store(store), run, workers=workers, on_part=on_part, engine=eng)


def check(
    selector: str,
    *,
    maximum: Iterable[str] | Mapping[str, float] = (),
    minimum: Iterable[str] | Mapping[str, float] = (),
    thresholds_file: str | None = None,
    defaults: bool = True,
    diagnose: bool = False,
    workers: int = DEFAULT_WORKERS,
    store: StorePath = None,
    engine: str = "local",
    ray_address: str | None = None,
) -> Gate:
    """A gate on a selector: each threshold (``maximum=["vllm_kl=1e-3"]`` or
    ``{"vllm_kl": 1e-3}``, ``minimum`` alike;
    ``thresholds_file``: TOML ``[max]`` / ``[min]`` tables) judged on the selection's metrics,
    over the default thresholds from the severity bands unless ``defaults=False``; with
    ``diagnose``, diagnose's checks too. ``Gate.passed``; ``Gate.cases`` one per threshold."""
    from mismatchctl.analysis.check.check import build_gate, merge, parse_threshold, read_thresholds
    from mismatchctl.engines.choice import choose_engine
    from mismatchctl.store import open_store

    given: list[Threshold] = read_thresholds(thresholds_file) if thresholds_file else []
    for direction, items in (("max", maximum), ("min", minimum)):
        texts = (
            [f"{k}={v}" for k, v in items.items()] if isinstance(items, Mapping) else _items(items)
        )
        given += [parse_threshold(t, direction, f"--{direction}") for t in texts]
    eng = choose_engine(engine, ray_address)
    return build_gate(
        open_store(store), selector, merge(given, defaults), diagnose=diagnose, workers=workers,
        engine=eng,
    )  # fmt: skip


def whatif(
    selector: str,
    *,
    methods: Iterable[str] = (),
    threshold: str | float | None = None,
    sweep: str | Iterable[str | float] | None = None,
    workers: int = DEFAULT_WORKERS,
    store: StorePath = None,
    on_part: Callable[[int], None] | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    preset: str | None = None,
    sets: Iterable[str] = (),
) -> Whatif | PresetWhatif:
    """What corrections would do on a selector: ``methods`` such as ``["seq-mis:2", "veto"]``
    (all at their defaults when empty), one ``threshold`` for a single method, or a ``sweep``
    (``"1.5,2,3"`` or a list) of thresholds of a single method. ``preset`` (``whatif_presets()``
    lists them) computes one framework's correction instead, configured by ``sets`` in the
    framework's own keys (``["rollout_is=sequence", "rollout_is_threshold=2"]``)."""
    from mismatchctl.analysis.whatif.preset import build_preset_whatif, preset_config
    from mismatchctl.analysis.whatif.whatif import build_whatif, parse_methods
    from mismatchctl.engines.choice import choose_engine
    from mismatchctl.store import open_store

    eng = choose_engine(engine, ray_address)
    if preset is not None:
        if list(methods) or threshold is not None or sweep is not None:
            raise UsageError(
                "--preset excludes --method, --threshold and --sweep",
                "configure the preset with --set KEY=VALUE in its framework's keys.",
            )
        chosen, config = preset_config(preset, _items(sets))
        return build_preset_whatif(
            open_store(store), selector, chosen, config, workers=workers, on_part=on_part,
            engine=eng,
        )  # fmt: skip
    methods = _items(methods)
    if sweep is not None and not isinstance(sweep, str):
        sweep = ",".join(str(v) for v in sweep)
    parsed, is_sweep = parse_methods(methods, None if threshold is None else str(threshold), sweep)
    return build_whatif(
        open_store(store),
        selector,
        parsed,
        sweep=is_sweep,
        workers=workers,
        on_part=on_part,
        engine=eng,
    )


def whatif_presets() -> PresetList:
    """Every framework preset of ``whatif``: name, framework version, source file, keys."""
    from mismatchctl.analysis.whatif.preset import list_presets

    return list_presets()


def demo(
    store: StorePath = DEMO_STORE,
    *,
    data: str | None = None,
    progress: Progress | None = None,
    on_part: Callable[[int], None] | None = None,
) -> tuple[list[DemoRun], DiagnosedReport]:
    """The bundled sample data ingested into ``store`` (runs already there are kept), the
    runs' tokenizer remembered for them, and its report with figures, per-gpu tables and a
    diagnosis of each run: ``demo_ingest`` then ``demo_report``."""
    runs = demo_ingest(store, demo_runs(data), progress=progress)
    return runs, demo_report(runs, store, on_part=on_part)


def demo_compile() -> Compile | None:
    """What a first demo compiles before it runs, when numba's on-disk cache of the demo's
    kernels is cold: how many kernels, about how long, where they are cached; None when every
    one is cached. Loads numba."""
    from mismatchctl.sample_runs import demo_compile as cold

    return cold()


def demo_runs(data: str | None = None) -> list[DemoRun]:
    """The runs of the bundled sample data's manifest (``data``: a directory holding a
    manifest.json; by default the source tree's ``sample_data/``)."""
    from mismatchctl.sample_runs import load_manifest

    return load_manifest(data)


def demo_ingest(
    store: StorePath = DEMO_STORE,
    runs: list[DemoRun] | None = None,
    *,
    progress: Progress | None = None,
    on_run: Callable[[str, int, int], None] | None = None,
) -> list[DemoRun]:
    """The sample runs (``demo_runs()`` by default) ingested into ``store`` (runs already there
    are kept), their tokenizer remembered for them; ``on_run(run, index, total)`` is called as
    each run's ingest starts."""
    from mismatchctl.sample_runs import ingest_demo, remember_tokenizers
    from mismatchctl.store import open_store

    runs = demo_runs() if runs is None else runs
    st = open_store(store)
    ingest_demo(st, runs, progress, on_run)
    remember_tokenizers(st, runs)
    return runs


DEMO_BISECT_SAMPLE = 32  # sequences: the demo's bisect phase stays a few seconds


def demo_bisect_skipped(data: str | None = None) -> str | None:
    """Why the demo cannot run ``bisect`` here (no torch, no shipped checkpoint), or None."""
    from mismatchctl.sample_runs import bisect_target

    target = bisect_target(data)
    return target if isinstance(target, str) else None


def demo_bisect(
    store: StorePath = DEMO_STORE,
    data: str | None = None,
    *,
    sample: int = DEMO_BISECT_SAMPLE,
    on_plan: Callable[[str], None] | None = None,
    on_pass: Callable[[str, int, int], None] | None = None,
) -> Bisect | str:
    """``bisect`` on the sample run whose trainer checkpoint ships with the sample data (its
    step alone, ``sample`` sequences, the checkpoint through its factory), or why it cannot run
    here (no torch, no checkpoint): the demo says so and goes on."""
    from mismatchctl.sample_runs import bisect_target

    target = bisect_target(data)
    if isinstance(target, str):
        return target
    return bisect(target.run, target.model, sample=sample, steps=str(target.step), store=store,
                  on_plan=on_plan, on_pass=on_pass)  # fmt: skip


def demo_report(
    runs: Iterable[DemoRun],
    store: StorePath = DEMO_STORE,
    *,
    on_part: Callable[[int], None] | None = None,
    on_diagnosis: Callable[[str, int, int], None] | None = None,
) -> DiagnosedReport:
    """The demo's report of the sample runs: figures, per-gpu tables, a diagnosis of each."""
    names = [r.name for r in runs]
    rep = report(
        names, by_gpu=True, store=store, on_part=on_part, figures=True, diagnose=True,
        on_diagnosis=on_diagnosis,
    )  # fmt: skip
    return cast("DiagnosedReport", rep)  # with diagnose: the report and its diagnoses


def check_failed(found: dict[str, list[Damage]]) -> None:
    """The error of a `runs check` that found damaged parts (naming the repair), if any."""
    from mismatchctl.store.integrity import damage_error

    damaged = [d for damage in found.values() for d in damage]
    if damaged:
        raise damage_error(damaged)


__all__ = [
    "DEFAULT_CLAMP",
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "DEFAULT_SETTLE",
    "DEFAULT_TAU",
    "DEFAULT_WORKERS",
    "DEMO_STORE",
    "FORMATS",
    "SPLIT_KEYS",
    "Certification",
    "Comparison",
    "Compile",
    "DemoRun",
    "DiagnosedReport",
    "Diagnosis",
    "Explain",
    "FileNote",
    "Gate",
    "Identical",
    "IngestResult",
    "MetricsIngest",
    "PresetList",
    "PresetWhatif",
    "Report",
    "RunInfo",
    "Show",
    "Started",
    "StepLine",
    "Stopped",
    "Store",
    "Tokens",
    "Warmed",
    "Watcher",
    "Whatif",
    "certify",
    "check",
    "check_failed",
    "check_runs",
    "compare",
    "demo",
    "demo_compile",
    "demo_ingest",
    "demo_report",
    "demo_runs",
    "diagnose",
    "explain",
    "gated_metrics",
    "ingest",
    "ingest_metrics",
    "open_store",
    "point_at",
    "remove_run",
    "report",
    "run_info",
    "runs",
    "sections",
    "show",
    "tokens",
    "views",
    "watch",
    "whatif",
    "whatif_presets",
]
