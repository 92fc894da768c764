"""What a report reads: runs, an optional step range, and the parts (with their source tags)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mismatchctl.errors import StoreError, UsageError
from mismatchctl.store import RunInfo, Store
from mismatchctl.store.integrity import check_run
from mismatchctl.store.parts import SEQUENCES, TOKENS


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

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.runs]

    @property
    def steps(self) -> StepRange | None:
        return self.rows.steps


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
    ``tags`` and to the rows of ``gpu`` and ``steps``; the parts that hold them."""
    names = list(dict.fromkeys(runs)) if runs else store.run_names()
    if not names:
        raise StoreError(
            f"the store {store} holds no runs",
            "ingest dumps first: mismatchctl ingest DUMPS --run NAME",
        )
    infos = [store.run(n) for n in names]
    sel = Selection(infos, RowFilter(steps, gpu), dict(tags or {}), label, store=store)
    for info in infos:
        check_run(store, info.name)  # a missing or truncated part is an error naming the fix
        wanted = {s.id: s for s in info.sources if _matches(s.tags, sel.tags)}
        for part in store.parts(info.name, TOKENS):
            if part.source_id in wanted and (
                steps is None or steps.overlaps(part.min_step, part.max_step)
            ):
                source_tags = tuple(sorted(wanted[part.source_id].tags.items()))
                sel.tasks.append(
                    PartTask(info.name, str(store.part_path(part)), source_tags, part.rows)
                )
        sel.sequence_paths[info.name] = [
            str(store.part_path(p))
            for p in store.parts(info.name, SEQUENCES)
            if p.source_id in wanted
        ]
    sel.runs = [r for r in infos if sel.sequence_paths[r.name]]
    return sel


def _matches(source_tags: dict[str, str], wanted: dict[str, str]) -> bool:
    return all(source_tags.get(k) == v for k, v in wanted.items())
