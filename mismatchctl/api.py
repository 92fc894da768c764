"""The verbs the CLI calls. They return objects; they never print and never exit."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from mismatchctl.analysis.compare import Comparison, build_comparison
from mismatchctl.analysis.diagnose import Diagnosis, build_diagnosis
from mismatchctl.analysis.report import Report, build_report
from mismatchctl.analysis.selection import parse_steps
from mismatchctl.analysis.splits import parse_by
from mismatchctl.analysis.whatif import Whatif, build_whatif, parse_methods
from mismatchctl.curves.ingest import MetricsIngest
from mismatchctl.curves.ingest import ingest_metrics as ingest_metrics_file
from mismatchctl.engines.local import DEFAULT_WORKERS
from mismatchctl.ingest.columns import parse_mapping
from mismatchctl.ingest.run_ingest import IngestResult, Options, Progress, ingest_files, parse_tags
from mismatchctl.stats.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED
from mismatchctl.store import RunInfo, Store, open_store
from mismatchctl.store.integrity import Damage, run_damage

StorePath = str | os.PathLike[str] | None


def ingest(
    inputs: Iterable[str | Path],
    run: str,
    *,
    tags: Iterable[str] | Mapping[str, str] = (),
    fmt: str | None = None,
    mapping: Iterable[str] | Mapping[str, str] = (),
    skip_bad: bool = False,
    store: StorePath = None,
    progress: Progress | None = None,
    trust_pickle: bool = False,
) -> IngestResult:
    """Read dump files into ``run`` of the store: all of them, or nothing on any error.

    ``trust_pickle=True`` loads torch ``.pt`` files with full unpickling, which runs any code
    the file contains: only for files from a source you trust. By default they are loaded with
    ``weights_only=True`` and a file that needs more is refused."""
    tag_map = dict(tags) if isinstance(tags, Mapping) else parse_tags(tags)
    col_map = dict(mapping) if isinstance(mapping, Mapping) else parse_mapping(mapping)
    opts = Options(
        run=run,
        tags=tag_map,
        fmt=fmt,
        mapping=col_map,
        skip_bad=skip_bad,
        trust_pickle=trust_pickle,
    )
    return ingest_files(open_store(store), [str(i) for i in inputs], opts, progress)


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
    return ingest_metrics_file(
        open_store(store),
        path,
        run,
        fmt=fmt,
        step_column=step_column,
        metrics=list(metrics),
        replace=replace,
    )


def runs(store: StorePath = None) -> list[RunInfo]:
    return open_store(store).runs()


def run_info(name: str, store: StorePath = None) -> RunInfo:
    return open_store(store).run(name)


def remove_run(name: str, store: StorePath = None) -> RunInfo:
    return open_store(store).remove(name)


def check_runs(
    names: Iterable[str] = (), *, deep: bool = False, store: StorePath = None
) -> dict[str, list[Damage]]:
    """Every part of the named runs (all runs when none is named) checked against the catalog:
    run -> its damaged parts (missing, truncated, wrong row count; ``deep`` decodes every page)."""
    st = open_store(store)
    return {name: run_damage(st, name, deep) for name in (list(names) or st.run_names())}


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
) -> Report:
    """Every metric of the selected runs (all runs when none is named), grouped by the default
    splits plus each ``by`` split (``"step"``, ``"step,turn_kind"``, ``"tag:engine"``...).
    ``figures=True`` also computes the figure data of the HTML report (``Report.figures``)."""
    return build_report(
        open_store(store),
        list(runs or []),
        bins=bins,
        by=parse_by(list(by)),
        by_gpu=by_gpu,
        steps=parse_steps(steps),
        workers=workers,
        on_part=on_part,
        figures=figures,
    )


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
) -> Comparison:
    """Two selectors (``"v0-ref"``, ``"gpu=H20"``, ``"v1@steps=0-200"``) side by side."""
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
    )


def diagnose(
    selector: str,
    *,
    workers: int = DEFAULT_WORKERS,
    store: StorePath = None,
    on_part: Callable[[int], None] | None = None,
) -> Diagnosis:
    """Every check of ``diagnose`` on a selector (``"v1-a100"``, ``"gpu=A100"``,
    ``"v1@steps=0-200"``): ``Diagnosis.checks`` with verdicts ok / warn / fail / n/a."""
    return build_diagnosis(open_store(store), selector, workers=workers, on_part=on_part)


def whatif(
    selector: str,
    *,
    methods: Iterable[str] = (),
    threshold: str | float | None = None,
    sweep: str | Iterable[str | float] | None = None,
    workers: int = DEFAULT_WORKERS,
    store: StorePath = None,
    on_part: Callable[[int], None] | None = None,
) -> Whatif:
    """What corrections would do on a selector: ``methods`` such as ``["seq-mis:2", "veto"]``
    (all at their defaults when empty), one ``threshold`` for a single method, or a ``sweep``
    (``"1.5,2,3"`` or a list) of thresholds of a single method."""
    methods = [methods] if isinstance(methods, str) else list(methods)
    if sweep is not None and not isinstance(sweep, str):
        sweep = ",".join(str(v) for v in sweep)
    parsed, is_sweep = parse_methods(methods, None if threshold is None else str(threshold), sweep)
    return build_whatif(
        open_store(store), selector, parsed, sweep=is_sweep, workers=workers, on_part=on_part
    )


__all__ = [
    "Comparison",
    "Diagnosis",
    "Report",
    "Store",
    "Whatif",
    "check_runs",
    "compare",
    "diagnose",
    "ingest",
    "ingest_metrics",
    "open_store",
    "remove_run",
    "report",
    "run_info",
    "runs",
    "whatif",
]
