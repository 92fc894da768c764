"""What a command reads, from what the user wrote: step ranges, selectors, and the store slice
(runs, parts) they name.

Selectors (``compare``, ``diagnose``, ``whatif``):

v1-a100                      a run
gpu=A100                     every row whose gpu is A100 (gpu is per row)
run=x,engine=vllm-0.18.1     run x, sources tagged engine=vllm-0.18.1
v1-final@steps=0..200        a run, steps 0 to 200 inclusive (``--steps`` syntax: ``-6..-5``,
                             ``150..``, ``..99``, ``42``; ``0-200`` still works for steps >= 0)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from mismatchctl.engines.plan import PartTask, RowFilter, Selection, StepRange
from mismatchctl.errors import StoreError, UsageError
from mismatchctl.store import RunInfo, Store
from mismatchctl.store.integrity import check_run
from mismatchctl.store.location import demo_store_hint
from mismatchctl.store.parts import ROUTING, SEQUENCES, TOKENS, twin_path

T = TypeVar("T")


_DOTS = re.compile(r"^\s*(-?\d+)?\s*\.\.\s*(-?\d+)?\s*$")  # A..B, A.., ..B; may be negative
_DASH = re.compile(r"^\s*(\d+)\s*-\s*(\d+)?\s*$")  # A-B, A- (the older syntax; steps >= 0)
_ONE = re.compile(r"^\s*(-?\d+)\s*$")
STEPS_SYNTAX = (
    "write A..B (inclusive; steps may be negative, e.g. -6..-5), A.. or ..B, or one step N; "
    "A-B and A- still work for steps >= 0."
)


def parse_steps(text: str | None) -> StepRange | None:
    """``0..200``, ``150..``, ``..99``, ``-6..-5``, ``42``; and the older ``0-200``, ``150-``.

    A text that the older syntax read differently (``-99`` was "up to 99") is refused, never
    reinterpreted: ``-6`` could be step -6 or steps up to 6."""
    if text is None:
        return None
    lo, hi = _bounds(text)
    if lo is None and hi is None:
        raise UsageError(f"step range `{text}` names no step", STEPS_SYNTAX)
    if lo is not None and hi is not None and lo > hi:
        raise UsageError(f"step range `{text}` is empty ({lo} > {hi})", "write A..B with A <= B.")
    return StepRange(lo, hi)


def _bounds(text: str) -> tuple[int | None, int | None]:
    for pattern in (_DOTS, _DASH):
        match = pattern.match(text)
        if match:
            lo, hi = (None if g is None else int(g) for g in match.groups())
            return lo, hi
    match = _ONE.match(text)
    if match is None:
        raise UsageError(f"step range `{text}` is not understood", STEPS_SYNTAX)
    step = int(match.group(1))
    if step < 0:
        raise UsageError(
            f"step range `{text}` is ambiguous: step {step}, or steps up to {-step} "
            "(what `-B` meant before steps could be negative)",
            f"write {step}..{step} for step {step} alone, or ..{-step} for steps up to {-step}.",
        )
    return step, step


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
    for name in names:
        try:
            info = store.run(name)
        except StoreError:
            if sel.named or name in store.run_names():
                raise  # not there (the error lists the runs), or a damaged catalog
            continue  # listed a moment ago, removed since
        try:
            _add_run(sel, store, info)
        except StoreError:
            if name in store.run_names():
                raise  # a damaged part: the error names the fix
            if sel.named:
                raise RunRemovedError([name], True) from None
    if not sel.named and not sel.sequence_paths:  # every run was removed since the listing
        raise _no_runs(store)
    sel.runs = [r for r in sel.runs if sel.sequence_paths[r.name]]
    return sel


def _no_runs(store: Store) -> StoreError:
    return StoreError(
        f"the store {store} holds no runs",
        "ingest dumps first: mismatchctl ingest DUMPS --run NAME." + demo_store_hint(str(store)),
    )


def _add_run(sel: Selection, store: Store, info: RunInfo) -> None:
    """The run's parts that the selection wants (all or nothing: a run removed meanwhile leaves
    no trace in the selection)."""
    name = info.name
    check_run(store, name)  # a missing or truncated part is an error naming the fix
    wanted = {s.id: s for s in info.sources if _matches(s.tags, sel.tags)}
    steps = sel.steps
    seq_parts = [p for p in store.parts(name, SEQUENCES) if p.source_id in wanted]
    of_source: dict[int | None, tuple[str, ...]] = {}
    for p in seq_parts:
        of_source[p.source_id] = (*of_source.get(p.source_id, ()), str(store.part_path(p)))
    twins = {str(store.part_path(p)) for p in store.parts(name, ROUTING)}
    tasks = [
        PartTask(
            name,
            str(store.part_path(part)),
            tuple(sorted(wanted[part.source_id].tags.items())),
            part.rows,
            of_source.get(part.source_id, ()),
            twin if (twin := twin_path(str(store.part_path(part)))) in twins else "",
        )
        for part in store.parts(name, TOKENS)
        if part.source_id in wanted
        and (steps is None or steps.overlaps(part.min_step, part.max_step))
    ]
    sequences = [str(store.part_path(p)) for p in seq_parts]
    sel.runs.append(info)
    sel.tasks += tasks
    sel.sequence_paths[name] = sequences


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


RUN_KEY, GPU_KEY = "run", "gpu"


@dataclass(frozen=True)
class Selector:
    text: str
    run: str | None = None
    gpu: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    steps: StepRange | None = None


def parse_selector(text: str) -> Selector:
    base, at, mods = text.partition("@")
    steps = _modifiers(mods, text) if at else None
    if "=" not in base:
        if not base.strip():
            raise UsageError(
                f"selector `{text}` names no run", "write RUN, KEY=VALUE[,...] or RUN@steps=A..B."
            )
        return Selector(text, run=base.strip(), steps=steps)
    pairs: dict[str, str] = {}
    for item in base.split(","):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            raise UsageError(
                f"selector `{text}`: `{item}` is not KEY=VALUE",
                "write e.g. gpu=A100 or run=x,engine=vllm-0.18.1.",
            )
        pairs[key] = value
    run, gpu = pairs.pop(RUN_KEY, None), pairs.pop(GPU_KEY, None)
    return Selector(text, run=run, gpu=gpu, tags=pairs, steps=steps)


def _modifiers(mods: str, text: str) -> StepRange | None:
    key, eq, value = mods.partition("=")
    if key.strip() != "steps" or not eq:
        raise UsageError(
            f"selector `{text}`: unknown modifier `@{mods}`",
            "the only modifier is @steps=A..B (e.g. v1-final@steps=0..200).",
        )
    return parse_steps(value)


def resolve(store: Store, sel: Selector) -> Selection:
    """The store slice a selector names, or an error saying what exists."""
    names = store.run_names()
    if sel.run is not None and sel.run not in names:
        raise StoreError(
            f"selector `{sel.text}`: no run `{sel.run}` in the store {store} "
            f"(runs: {', '.join(names) or 'none'})",
            "list the runs with `mismatchctl runs`." + demo_store_hint(str(store)),
        )
    infos = [store.run(sel.run)] if sel.run else store.runs()
    _check_tags(sel, infos)
    if sel.gpu is not None:
        gpus = sorted({g for r in infos for g in r.gpus})
        if sel.gpu not in gpus:
            raise StoreError(
                f"selector `{sel.text}`: no rows with gpu={sel.gpu} (gpus: {', '.join(gpus) or 'none'})",
                "tag runs with --tag gpu=NAME at ingest, or pick one of the gpus listed.",
            )
    selection = select(
        store, [sel.run] if sel.run else None, sel.steps, gpu=sel.gpu, tags=sel.tags, label=sel.text
    )
    if not selection.tasks:
        raise empty_selection_error(selection)
    return selection


def _check_tags(sel: Selector, infos: list) -> None:
    for key, value in sel.tags.items():
        values = sorted({s.tags[key] for r in infos for s in r.sources if key in s.tags})
        if not values:
            known = sorted(
                {k for r in infos for s in r.sources for k in s.tags} - {RUN_KEY, GPU_KEY}
            )
            raise StoreError(
                f"selector `{sel.text}`: no source has a tag `{key}` "
                f"(tags: {', '.join([RUN_KEY, GPU_KEY, *known])})",
                "`mismatchctl runs` lists each run's tags.",
            )
        if value not in values:
            raise StoreError(
                f"selector `{sel.text}`: no data with {key}={value} (values: {', '.join(values)})",
                "`mismatchctl runs` lists each run's tags.",
            )


def same_selection(a: Selection, b: Selection) -> bool:
    """Both sides read the same parts with the same row filter (known before reading)."""
    return (a.tasks, a.sequence_paths, a.rows) == (b.tasks, b.sequence_paths, b.rows)
