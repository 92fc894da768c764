"""Names in a training log: the step column, metric names, ``--metric`` selection, and what a
reader found under each name.

Every reader (CSV, JSON lines, TensorBoard) hands ``read.py`` a :class:`Found`: the candidate
metrics by name (numeric values in file order, or why they are not numeric), the internal
columns, and what it already excluded. Selection with ``--metric`` works on those names:

* ``NAME=SOURCE`` keeps metric SOURCE under the name NAME (SOURCE may be an internal column);
* ``PATTERN`` keeps every non-internal metric matching the fnmatch pattern under its own name
  (a source that a ``NAME=SOURCE`` renames is not kept a second time under its own name).

With no spec every non-internal metric is kept.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

import numpy as np

from mismatchctl.display import file_label
from mismatchctl.errors import InputError, UsageError

# The step column, first match wins.
STEP_CANDIDATES: tuple[str, ...] = (
    "_step",
    "step",
    "Step",
    "global_step",
    "trainer/global_step",
    "train/global_step",
    "training/global_step",
    "rollout_id",
    "iteration",
)
INTERNAL_PREFIX = "_"  # W&B bookkeeping: _runtime, _timestamp, _wandb, ...
CHART_SEPARATOR = " - "  # W&B chart export: "<run name> - <metric>"
COMPANION_SUFFIXES = ("__MIN", "__MAX")  # W&B chart export: the band around a smoothed line
LISTED = 20  # names shown in an error before "... (N in all)"

# Reasons of ``excluded`` (reason -> count).
NON_NUMERIC = "non-numeric column"
NON_SCALAR = "non-scalar tag"
INTERNAL = "internal column"
COMPANION = "min/max companion column"
ROW_WITHOUT_STEP = "row without step"
SUPERSEDED = "superseded value"
NOT_SELECTED = "not selected"
EMPTY_EVENT_FILE = "empty event file"
DAMAGED_EVENT_FILE = "event file read up to a damaged record"


@dataclass
class Values:
    """The numeric values of one metric, in file order (a step may repeat)."""

    steps: np.ndarray  # int64
    values: np.ndarray  # float64, NaN and +-inf kept


@dataclass
class NonNumeric:
    """A metric excluded whole: ``reason`` is a key of ``excluded``, ``detail`` says why."""

    reason: str
    detail: str  # e.g. "e.g. 'warmup done' at data row 3", or "histogram"


@dataclass
class Found:
    """What a reader found: candidate metrics by name, in file order."""

    step_column: str
    columns: dict[str, Values | NonNumeric]
    internal: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    excluded: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class MetricSpec:
    """One ``--metric``: ``NAME=SOURCE`` (``name`` set) or a PATTERN (``name`` None)."""

    text: str
    name: str | None
    source: str


@dataclass
class Selection:
    """Metric name -> source name, and the sources named by a ``NAME=SOURCE``."""

    names: dict[str, str]
    explicit: set[str]


def listing(names: Sequence[str], limit: int = LISTED) -> str:
    """``a, b, c`` or ``a, b, ... (45 in all)``; ``(none)`` when empty."""
    if not names:
        return "(none)"
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown}, ... ({len(names)} in all)"


def count(n: int, singular: str, plural: str | None = None) -> str:
    """``1 row``, ``2 rows``."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def numbers(values: Sequence[int], limit: int = 5) -> str:
    """``2, 3, 7`` or ``2, 3, 7, 9, 12, ...``."""
    shown = ", ".join(str(v) for v in values[:limit])
    return shown + (", ..." if len(values) > limit else "")


def cut(text: str, limit: int = 40) -> str:
    """``text`` cut to ``limit`` characters (``...`` marks the cut)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shorten(value: object, limit: int = 40) -> str:
    """A value for a message: ``repr`` of text, ``str`` of anything else, cut to ``limit``."""
    return cut(repr(value) if isinstance(value, str) else str(value), limit)


def cannot_open(path: Path, exc: OSError) -> InputError:
    """The error for a file that cannot be opened or read at all."""
    return InputError(
        f"cannot read {path}: {exc.strerror or exc}",
        "check that the path is right and that you may read it.",
    )


def unreadable(path: Path, what: str, exc: Exception) -> InputError:
    """The error for a file that opens but does not parse as ``what``."""
    first = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    return InputError(
        f"cannot read {file_label(path)} as {what}: {first}",
        "the file is truncated or not what its name says; re-export it, or pass --format.",
    )


def clean_name(raw: str, where: str) -> str:
    """The name without surrounding whitespace; InputError when empty or holding control
    characters. ``where`` names the place, e.g. ``history.csv: column 4``."""
    name = raw.strip()
    if not name:
        problem = "is empty"
    elif any(unicodedata.category(ch) == "Cc" for ch in name):
        problem = "contains control characters"
    else:
        return name
    raise InputError(
        f"{where}: the name {raw!r} {problem}",
        "every column or key needs a name of printable characters; fix the header or the logger "
        "that wrote it (an unnamed first CSV column is often a pandas index: to_csv(index=False)).",
    )


def find_step_column(names: Sequence[str], explicit: str | None, source: str, kind: str) -> str:
    """The explicit step column when present, else the first of STEP_CANDIDATES present.
    ``kind`` is ``column`` or ``key`` (for the messages)."""
    if explicit is not None:
        if explicit in names:
            return explicit
        raise InputError(
            f"{source}: no {kind} `{explicit}` (from --step-column) (found: {listing(names)})",
            f"name an existing {kind} with --step-column.",
        )
    for candidate in STEP_CANDIDATES:
        if candidate in names:
            return candidate
    raise InputError(
        f"{source}: no step {kind} (looked for {', '.join(STEP_CANDIDATES)}; "
        f"found: {listing(names)})",
        f"name the {kind} that holds the step with --step-column <{kind}>.",
    )


def is_internal(name: str, step_column: str) -> bool:
    return name.startswith(INTERNAL_PREFIX) and name != step_column


def chart_prefix(names: Sequence[str]) -> str | None:
    """The ``<run name> - `` prefix that every name carries (a W&B chart export), or None.
    When several ``" - "`` could end it, the longest one common to all names wins."""
    if not names:
        return None
    first = names[0]
    ends = [m.end() for m in re.finditer(re.escape(CHART_SEPARATOR), first)]
    for end in reversed(ends):
        prefix = first[:end]
        if all(n.startswith(prefix) and n[end:].strip() for n in names):
            return prefix
    return None


def companion_columns(names: Collection[str]) -> list[str]:
    """``X__MIN`` / ``X__MAX`` columns whose ``X`` is a column too, in the order given."""
    present = set(names)
    return [
        n
        for n in names
        if n.endswith(COMPANION_SUFFIXES) and n[: -len(COMPANION_SUFFIXES[0])] in present
    ]


def parse_metric_specs(specs: Iterable[str]) -> list[MetricSpec]:
    """``--metric`` values -> specs; UsageError on a malformed one or a NAME given twice."""
    parsed: list[MetricSpec] = []
    targets: dict[str, MetricSpec] = {}
    for text in specs:
        name, sep, source = text.partition("=")
        name, source = name.strip(), source.strip()
        if not name or (sep and not source):
            raise UsageError(
                f"--metric `{text}` is neither NAME=SOURCE nor a name or pattern",
                "write e.g. --metric grad_norm=actor/grad_norm or --metric 'critic/*'.",
            )
        _check_printable(name, text)
        _check_printable(source, text)
        if not sep:
            parsed.append(MetricSpec(text, None, name))
            continue
        spec = MetricSpec(text, name, source)
        earlier = targets.setdefault(name, spec)
        if earlier.source != source:
            raise UsageError(
                f"--metric `{earlier.text}` and --metric `{text}` both name a metric `{name}`",
                "give each metric its own name.",
            )
        parsed.append(spec)
    return parsed


def _check_printable(part: str, text: str) -> None:
    if any(unicodedata.category(ch) == "Cc" for ch in part):
        raise UsageError(
            f"--metric {text!r} contains control characters", "write the name as it is logged."
        )


def select_metrics(
    available: Sequence[str],
    specs: Sequence[MetricSpec],
    source: str,
    internal: Collection[str] = (),
) -> Selection:
    """Which of ``available`` to keep and under which names (module docstring)."""
    visible = [n for n in available if n not in internal]
    if not specs:
        return Selection({n: n for n in visible}, set())
    names: dict[str, str] = {}
    explicit: set[str] = set()
    for spec in specs:
        if spec.name is None:
            continue
        if spec.source not in available:
            raise InputError(
                f"--metric {spec.text}: no metric `{spec.source}` in {source} "
                f"(found: {listing(visible)})",
                "name an existing metric on the right of `=` (names are case-sensitive).",
            )
        names[spec.name] = spec.source
        explicit.add(spec.source)
    for spec in specs:
        if spec.name is None:
            _add_matches(names, explicit, visible, spec, source)
    return Selection(names, explicit)


def _add_matches(
    names: dict[str, str], explicit: set[str], visible: list[str], spec: MetricSpec, source: str
) -> None:
    matches = [n for n in visible if n == spec.source or fnmatchcase(n, spec.source)]
    if not matches:
        raise InputError(
            f"--metric {spec.text}: no metric in {source} matches `{spec.source}` "
            f"(found: {listing(visible)})",
            "patterns use shell wildcards (e.g. 'actor/*') and are case-sensitive.",
        )
    for match in matches:
        if match in explicit:
            continue
        taken = names.get(match)
        if taken is not None and taken != match:
            raise UsageError(
                f"--metric: metric `{match}` would come from both `{taken}` "
                f"(--metric {match}={taken}) and `{match}` (--metric {spec.text})",
                f"keep one of them under another name, e.g. --metric {match}_2={match}.",
            )
        names[match] = match
