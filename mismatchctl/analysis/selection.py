"""What a command reads: the store slice (runs, parts) that its selectors (``selectors.py``: the
one grammar of step ranges and selectors) name, or an error saying what exists."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from mismatchctl.analysis.selectors import (
    GPU_KEY,
    GRAMMAR,
    RUN_KEY,
    Selector,
    combine,
    parse_selector,
    parse_steps,
    quoted,
)
from mismatchctl.display import did_you_mean, shown
from mismatchctl.engines.plan import PartTask, RowFilter, Selection, StepRange
from mismatchctl.errors import StoreError, UsageError
from mismatchctl.store import RunInfo, Store
from mismatchctl.store.catalog import PartRecord
from mismatchctl.store.integrity import check_parts, check_run
from mismatchctl.store.location import demo_store_hint
from mismatchctl.store.parts import MASKED, ROUTING, SEQUENCES, TOKENS, twin_path

T = TypeVar("T")


class RunRemovedError(StoreError):
    """Runs of a selection were removed (``runs rm``) while it was being read."""

    def __init__(self, runs: list[str], named: bool) -> None:
        listed = ", ".join(f"`{r}`" for r in runs)
        super().__init__(
            f"run {listed} was removed while it was being read"
            if len(runs) == 1
            else f"runs {listed} were removed while they were being read",
            "run the command again (`mismatchctl runs` lists the runs the store holds now).",
        )
        self.runs, self.named = runs, named

    def __reduce__(self) -> tuple:
        return (self.__class__, (self.runs, self.named))


def select(
    store: Store,
    runs: list[str] | None,
    steps: StepRange | None = None,
    *,
    gpu: str | None = None,
    tags: dict[str, str] | None = None,
    label: str = "",
) -> Selection:
    """The named runs (every run when none is named), narrowed to the sources whose tags match
    ``tags`` and to the rows of ``gpu`` and ``steps``; the parts that hold them. Of every run,
    one removed since the store was listed is left out; a named one is a RunRemovedError."""
    names = list(dict.fromkeys(runs)) if runs else store.run_names()
    if not names:
        raise _no_runs(store)
    sel = Selection([], RowFilter(steps, gpu), dict(tags or {}), label, store=store)
    sel.named = bool(runs)
    held: set[str] = set()  # runs with sequence rows of the wanted sources (at any step)
    for name in names:
        try:
            info = store.run(name)
        except StoreError:
            if sel.named or name in store.run_names():
                raise  # not there (the error lists the runs), or a damaged catalog
            continue  # listed a moment ago, removed since
        try:
            if _add_run(sel, store, info):
                held.add(name)
        except StoreError:
            if name in store.run_names():
                raise  # a damaged part: the error names the fix
            if sel.named:
                raise RunRemovedError([name], True) from None
    if not sel.named and not sel.sequence_paths:  # every run was removed since the listing
        raise _no_runs(store)
    sel.runs = [r for r in sel.runs if r.name in held]
    return sel


def _no_runs(store: Store) -> StoreError:
    return StoreError(
        f"the store {store} holds no runs",
        "ingest dumps first: mismatchctl ingest DUMPS --run NAME." + demo_store_hint(str(store)),
    )


def _add_run(sel: Selection, store: Store, info: RunInfo) -> bool:
    """The run's parts that the selection wants (all or nothing: a run removed meanwhile leaves
    no trace in the selection); whether its wanted sources have sequence rows at all. A
    selection of some steps holds, and checks, only the parts with rows of those steps: a
    watched run's new step reads and checks its own parts, not the thousand before it."""
    name = info.name
    steps = sel.steps
    if steps is None:
        check_run(store, name)  # a missing or truncated part is an error naming the fix
    wanted = {s.id: s for s in info.sources if _matches(s.tags, sel.tags)}
    of_wanted = [p for p in store.parts(name, SEQUENCES) if p.source_id in wanted]
    seq_parts = [p for p in of_wanted if _holds(p, steps)]
    of_source: dict[int | None, tuple[str, ...]] = {}
    for p in seq_parts:
        of_source[p.source_id] = (*of_source.get(p.source_id, ()), str(store.part_path(p)))
    routing = {str(store.part_path(p)): p for p in store.parts(name, ROUTING)}
    token_parts = [
        part
        for part in store.parts(name, TOKENS)
        if part.source_id in wanted and _holds(part, steps)
    ]
    tasks = [
        PartTask(
            name,
            str(store.part_path(part)),
            tuple(sorted(wanted[part.source_id].tags.items())),
            part.rows,
            of_source.get(part.source_id, ()),
            twin if (twin := twin_path(str(store.part_path(part)))) in routing else "",
        )
        for part in token_parts
    ]
    if steps is not None:
        twins = [routing[t.routing] for t in tasks if t.routing]
        masked = [p for p in store.parts(name, MASKED) if _holds(p, steps)]
        check_parts(store, name, [*token_parts, *seq_parts, *twins, *masked])
    sequences = [str(store.part_path(p)) for p in seq_parts]
    sel.runs.append(info)
    sel.tasks += tasks
    sel.sequence_paths[name] = sequences
    return bool(of_wanted)


def _holds(part: PartRecord, steps: StepRange | None) -> bool:
    """Whether a part may hold rows of the steps (a part without its steps recorded may)."""
    if steps is None or part.min_step is None or part.max_step is None:
        return True
    return steps.overlaps(part.min_step, part.max_step)


def removed_while_reading(selection: Selection) -> RunRemovedError | None:
    """After an error met while reading the selection: a RunRemovedError when some of its runs
    are no longer in the catalog (``runs rm`` deleted their parts), else None."""
    if selection.store is None:
        return None
    present = set(selection.store.run_names())
    gone = [n for n in selection.names if n not in present]
    return RunRemovedError(gone, selection.named) if gone else None


@contextmanager
def reading(*selections: Selection) -> Iterator[None]:
    """Around a read of ``selections``: a part that fails because its run was removed
    meanwhile (``runs rm``) is a RunRemovedError, never the repair hint of a damaged store."""
    try:
        yield
    except Exception as exc:
        if not isinstance(exc, StoreError | OSError) and not _arrow(exc):
            raise
        removed = next(filter(None, map(removed_while_reading, selections)), None)
        if removed is None:
            raise  # a damaged part: the error names the fix
        raise removed from None


def _arrow(exc: Exception) -> bool:
    return type(exc).__module__.startswith("pyarrow")


def reread(build: Callable[[], T], attempts: int = 3) -> T:
    """``build()`` again when runs it did not name were removed while it read them: a report of
    every run is then the report of the runs that remain."""
    for _ in range(attempts - 1):
        try:
            return build()
        except RunRemovedError as exc:
            if exc.named:
                raise
    return build()


def empty_selection_error(selection: Selection) -> StoreError:
    """The one error of every command whose selection holds no model token."""
    if selection.label:
        what = f"selector `{selection.label}`"
    else:
        what = "the selection (" + ", ".join(selection.names or ["no run"])
        what += f"; steps {selection.steps})" if selection.steps is not None else ")"
    detail = ""
    if selection.steps is not None and len(selection.runs) == 1:
        detail = f" (run {selection.runs[0].name} holds steps {_span(selection.runs[0].steps)})"
    elif selection.steps is not None and selection.runs:
        spans = ", ".join(f"{r.name} {_span(r.steps)}" for r in selection.runs)
        detail = f" (the runs hold steps: {spans})"
    return StoreError(
        f"{what} matches no model tokens{detail}",
        "widen the selection: `mismatchctl runs` lists each run's steps and tags, "
        "`mismatchctl runs show RUN` its gpus.",
    )


def _span(steps: list[int]) -> str:
    if not steps:
        return "none"
    return str(StepRange(steps[0], steps[-1])) if len(steps) > 1 else str(steps[0])


def _matches(source_tags: dict[str, str], wanted: dict[str, str]) -> bool:
    return all(source_tags.get(k) == v for k, v in wanted.items())


def resolve(store: Store, sel: Selector) -> Selection:
    """The store slice a selector names, or an error saying what exists."""
    return resolve_runs(store, None if sel.run is None else [sel.run], sel)


def resolve_text(store: Store, text: str) -> Selection:
    """The store slice of a selector's text (``v1@steps=0..200``, ``gpu=H20``)."""
    return resolve(store, parse_selector(text))


def resolve_all(store: Store, texts: list[str], steps: StepRange | None = None) -> Selection:
    """Several selectors read as one slice (``report A B``): their runs (every run when none
    is given), the filters they share, and ``steps`` (``--steps``)."""
    runs, filters = combine([parse_selector(t) for t in texts], steps)
    if filters.gpu is not None:  # a run without rows of the gpu has no place in a report of it
        infos = [_run(store, n, filters.text) for n in runs] if runs else store.runs()
        runs = [r.name for r in infos if filters.gpu in r.gpus] or runs
    return resolve_runs(store, runs, filters)


def resolve_runs(store: Store, runs: list[str] | None, sel: Selector) -> Selection:
    """``runs`` (every run when None) kept to the filters of ``sel``; an unknown run, tag or
    gpu is an error naming the ones there are (and the closest)."""
    infos = [_run(store, name, sel.text) for name in runs] if runs else store.runs()
    _check_tags(sel, infos)
    if sel.gpu is not None:
        gpus = sorted({g for r in infos for g in r.gpus})
        if sel.gpu not in gpus:
            raise StoreError(
                f"selector `{shown(sel.text)}`: no rows with gpu={shown(quoted(sel.gpu), 80)} "
                f"(gpus: {', '.join(quoted(g) for g in gpus) or 'none'})",
                did_you_mean(quoted(sel.gpu), [quoted(g) for g in gpus])
                + "tag runs with --tag gpu=NAME at ingest, or pick one of the gpus listed.",
            )
    selection = select(store, runs, sel.steps, gpu=sel.gpu, tags=sel.tags, label=sel.text)
    if not selection.tasks:
        raise empty_selection_error(selection)
    return selection


def _run(store: Store, name: str, text: str) -> RunInfo:
    names = store.run_names()
    if name in names:
        return store.run(name)
    where = f"selector `{shown(text)}`: " if text else ""
    raise StoreError(
        f"{where}no run `{shown(name, 80)}` in the store {store} "
        f"(runs: {', '.join(names) or 'none'})",
        did_you_mean(name, names)
        + "list the runs with `mismatchctl runs`; "
        + GRAMMAR
        + demo_store_hint(str(store)),
    )


def named_runs(store: Store, texts: list[str]) -> list[RunInfo]:
    """The runs several selectors read (every run when one names none), checked as
    :func:`resolve_all` checks them, without reading any part."""
    sels = [parse_selector(t) for t in texts]
    if not sels or any(s.run is None for s in sels):
        return store.runs()
    return [_run(store, s.run, "" if s.whole else s.text) for s in sels if s.run is not None]


def _check_tags(sel: Selector, infos: list[RunInfo]) -> None:
    for key, value in sel.tags.items():
        values = sorted({s.tags[key] for r in infos for s in r.sources if key in s.tags})
        if not values:
            known = sorted(
                {k for r in infos for s in r.sources for k in s.tags} - {RUN_KEY, GPU_KEY}
            )
            raise StoreError(
                f"selector `{shown(sel.text)}`: no source has a tag `{shown(key, 80)}` "
                f"(tags: {', '.join([RUN_KEY, GPU_KEY, *known])})",
                _run_meant(key, value, infos)
                + did_you_mean(key, [RUN_KEY, GPU_KEY, *known])
                + "`mismatchctl runs` lists each run's tags; "
                + GRAMMAR,
            )
        if value not in values:
            raise StoreError(
                f"selector `{shown(sel.text)}`: no data with {shown(key, 80)}="
                f"{shown(quoted(value), 80)} (values: {', '.join(quoted(v) for v in values)})",
                did_you_mean(quoted(value), [quoted(v) for v in values])
                + "`mismatchctl runs` lists each run's tags; a value holding @ , = or a quote "
                'is written in double quotes (engine="vllm@0.8").',
            )


def _run_meant(key: str, value: str, infos: list[RunInfo]) -> str:
    """``did you mean `v1@steps=1..3`? `` for ``v1=1..3`` (a run, or a close name, and a step
    range written as a tag), else ``""``."""
    try:
        steps = parse_steps(value)
    except UsageError:
        return ""
    close = difflib.get_close_matches(key, [r.name for r in infos], n=1, cutoff=0.6)
    if not close:
        return ""
    return f"did you mean `{shown(close[0], 80)}@steps={steps}`? "


def same_selection(a: Selection, b: Selection) -> bool:
    """Both sides read the same parts with the same row filter (known before reading)."""
    return (a.tasks, a.sequence_paths, a.rows) == (b.tasks, b.sequence_paths, b.rows)
