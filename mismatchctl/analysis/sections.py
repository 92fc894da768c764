"""The sections a result is shown as: what the terminal, HTML and figure writers walk.

A result (report, comparison, diagnosis, what-if) is built into a list of sections here in the
analysis layer, with every derived number (ratios, bands, shares, verdicts, the worst steps)
already computed; writers only format and lay out. Cells hold raw values (numbers, ``None`` for
"not computable", labels as they come from the data): each writer escapes and formats them by
the column's :class:`Kind` (or its metric's format in the registry).

Adding a section: build it in the result's ``*_view`` module with one of these types; a new
*type* of section needs one entry per writer (``render/terminal.py``, ``render/html.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from mismatchctl.stats.registry import Fmt, Metric


class Kind(StrEnum):
    """How a cell is written (a metric column takes its registry format)."""

    LABEL = "label"  # a key from the data (run, gpu, tag value, bin label): escaped, left
    TEXT = "text"  # a sentence: escaped, wraps
    COUNT = "count"
    ID = "id"  # an integer key such as a step: right-aligned, written as it is
    VALUE = "value"  # 4 significant digits
    CORR = "corr"  # 6 significant digits
    SIGNED = "signed"  # a correlation coefficient with its sign, 3 decimals (+0.962)
    SHARE = "share"  # a fraction as a percentage
    RATIO = "ratio"
    BAND = "band"  # a severity band name, coloured
    VERDICT = "verdict"  # ok / warn / fail / n/a, coloured

    @classmethod
    def of(cls, fmt: Fmt) -> Kind:
        return cls(fmt.value)


NUMERIC = {Kind.COUNT, Kind.ID, Kind.VALUE, Kind.CORR, Kind.SIGNED, Kind.SHARE, Kind.RATIO}


@dataclass(frozen=True)
class Column:
    """A column of a table: the row key it shows, its header and how it is written."""

    key: str
    header: str
    kind: Kind = Kind.VALUE
    metric: Metric | None = None  # the registry entry (its description becomes a tooltip)
    band_key: str | None = None  # a row key holding the band that colours this cell
    hot_key: str | None = None  # a row key whose truth makes this cell stand out
    link_key: str | None = None  # a row key holding the page anchor this cell links to (HTML)
    # a row key holding the Kind this row's cell is written as (a table whose rows are metrics
    # of different formats, e.g. a correlation beside a count); None: ``kind`` on every row
    kind_key: str | None = None

    @classmethod
    def of(
        cls, metric: Metric, key: str | None = None, header: str | None = None, **kw: Any
    ) -> Column:
        """A column showing ``metric`` (from row key ``key``, default the metric's own)."""
        return cls(key or metric, header or metric.header, Kind.of(metric.fmt), metric, **kw)

    @property
    def numeric(self) -> bool:
        return self.kind in NUMERIC

    def kind_in(self, row: dict[str, Any]) -> Kind:
        """How this column's cell of ``row`` is written."""
        own = row.get(self.kind_key) if self.kind_key is not None else None
        return Kind(own) if own is not None else self.kind


@dataclass
class Table:
    """Rows of named cells. ``keys`` leading columns are the row's labels (a narrow terminal
    repeats them when it splits the table by columns)."""

    id: str
    title: str
    columns: list[Column]
    rows: list[dict[str, Any]]
    keys: int = 1
    note: str | None = None  # how to read it, or what was left out
    bold_key: str | None = None  # a row key whose truth writes the row in bold


@dataclass(frozen=True)
class Fact:
    """One line of a headline: a label and a value, with an optional band and a remark."""

    label: str
    value: Any
    kind: Kind = Kind.VALUE
    band: str | None = None
    remark: str | None = None  # e.g. why the value is not a number


@dataclass
class Facts:
    id: str
    title: str
    facts: list[Fact]


@dataclass(frozen=True)
class Line:
    text: str
    tone: str = ""  # "" | "bold" | "note" | "warn" | "dim"


@dataclass
class Lines:
    """Sentences: verdicts, events, notes."""

    id: str
    title: str | None
    lines: list[Line]


@dataclass
class StepSeries:
    """A run's per-step values: every step in order with its band, and the steps ranked worst
    first (the terminal shows a sparkline and the worst when there are many)."""

    id: str
    title: str
    table: Table  # one row per step, in step order
    value_key: str  # the column drawn by the sparkline
    worst: list[int] = field(default_factory=list)  # row indices, largest value first
    every: bool = False  # asked for every step (``--by step``): no sparkline, no cut


@dataclass(frozen=True)
class CheckRow:
    layer: str
    verdict: str
    name: str
    title: str
    finding: str
    next: str | None
    evidence: dict[str, Any]
    anchor: str = ""  # a page-wide unique id (check-<selection>-<name>)


@dataclass
class Checks:
    """A layer of diagnosis checks; ``brief``: one line each (``diagnose -q``)."""

    id: str
    title: str
    checks: list[CheckRow]
    brief: bool = False


@dataclass
class Figure:
    """A figure of the HTML page: ``kind`` names its builder in render/figures.py, ``data`` is
    what it draws (computed here), ``how`` says how to read it."""

    id: str
    title: str
    kind: str
    data: Any
    how: str = ""


@dataclass
class Block:
    """A titled group of sections (one run of a report, one layer of checks): a heading in the
    terminal, a section (collapsed when ``collapsed``) in the HTML page."""

    id: str
    title: str
    sections: list[Section]
    collapsed: bool = False
    summary: str | None = None  # one line shown with the title when collapsed
    media: str = "all"  # "all", or only "terminal" / "html" (one writer shows it, the other not)
    bare: bool = False  # no heading of its own (a wrapper that only says where it is shown)


@dataclass(frozen=True)
class HeatToken:
    """One token of a :class:`Heat`: its text, its level (an index into the legend) and the
    tooltip of the HTML page."""

    text: str
    level: int
    tip: str
    mark: bool = False  # drawn marked (underlined): see ``Heat.mark``


@dataclass(frozen=True)
class HeatGap:
    """Positions between tokens that are not shown as tokens (a prompt, a tool response);
    ``text``: their own tokens as text when known (a tool response's, written in a marked
    style after the label), else None."""

    label: str
    text: str | None = None


@dataclass
class Heat:
    """A sequence as text, each token coloured by its level; ``legend``: each level's label."""

    id: str
    title: str
    items: list[HeatToken | HeatGap]
    legend: list[str]
    how: str = ""
    mark: str = ""  # what a marked token is (its legend entry); "" when none can be


Section = Table | Facts | Lines | StepSeries | Checks | Figure | Block | Heat


def slug(*parts: object) -> str:
    """An HTML id from parts (run names included): ASCII letters, digits, ``-`` and ``.`` as
    they are, any other character as ``_`` and its code point, so distinct names give distinct
    ids."""
    out = []
    for part in parts:
        text = str(part)
        out.append(
            "".join(
                c if (c.isalnum() and c.isascii()) or c in "-." else f"_{ord(c):x}" for c in text
            )
        )
    return "-".join(out)
