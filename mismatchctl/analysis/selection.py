"""What a report reads: runs, an optional step range, and the parts (with their source tags)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from mismatchctl.errors import StoreError, UsageError
from mismatchctl.store import RunInfo, Store
from mismatchctl.store.integrity import check_run
from mismatchctl.store.location import demo_store_hint
from mismatchctl.store.parts import SEQUENCES, TOKENS

T = TypeVar("T")


@dataclass(frozen=True)
class StepRange:
    """Inclusive bounds; None means open."""

    lo: int | None = None
    hi: int | None = None

    def overlaps(self, lo: int | None, hi: int | None) -> bool:
        if lo is None or hi is None:
            return True
        return (self.lo is None or hi >= self.lo) and (self.hi is None or lo <= self.hi)

    def __str__(self) -> str:
        """The range as ``--steps`` reads it back: ``42``, ``0..200``, ``150..``, ``..99``."""
        if self.lo is not None and self.lo == self.hi and self.lo >= 0:
            return str(self.lo)
        return f"{'' if self.lo is None else self.lo}..{'' if self.hi is None else self.hi}"


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


@dataclass(frozen=True)
class PartTask:
    """One token part to read, with what is constant over it."""

    run: str
    path: str
    tags: tuple[tuple[str, str], ...]
    rows: int


@dataclass(frozen=True)
class RowFilter:
    """What is kept inside a part: a step range and/or one gpu (gpu is a per-row value)."""

    steps: StepRange | None = None
    gpu: str | None = None

    @property
    def active(self) -> bool:
        return self.steps is not None or self.gpu is not None


@dataclass
class Selection:
    runs: list[RunInfo]
    rows: RowFilter = field(default_factory=RowFilter)
    tags: dict[str, str] = field(default_factory=dict)  # source-level tag filter
    label: str = ""
    tasks: list[PartTask] = field(default_factory=list)
    sequence_paths: dict[str, list[str]] = field(default_factory=dict)
    store: Store | None = None  # where the runs' training-log metrics are read from
    named: bool = True  # the runs were named (not every run of the store, as found)

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.runs]

    @property
    def steps(self) -> StepRange | None:
        return self.rows.steps


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
    tasks = [
        PartTask(
            name,
            str(store.part_path(part)),
            tuple(sorted(wanted[part.source_id].tags.items())),
            part.rows,
        )
        for part in store.parts(name, TOKENS)
        if part.source_id in wanted
        and (steps is None or steps.overlaps(part.min_step, part.max_step))
    ]
    sequences = [
        str(store.part_path(p)) for p in store.parts(name, SEQUENCES) if p.source_id in wanted
    ]
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
