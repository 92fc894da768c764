"""Tables that never elide a cell: on a narrow terminal a table is printed as several tables.

Rich fits a table that is wider than the console by shrinking its columns, and a number that no
longer fits its column is cut to ``1.3…``. :func:`fit` wraps a table in a renderable that, at
render time, measures every column at its natural width (a column of sentences is bounded by its
``max_width`` and wraps within it) and, when they do not all fit, prints the table as consecutive
tables: each repeats the ``keys`` leading columns (the row labels) and takes as many of the other
columns as fit. A column too wide even alone with the keys is folded onto more lines, never
elided.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator

from rich.console import Console, ConsoleOptions, RenderableType
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text

UNBOUNDED = 1_000_000  # a width no table reaches: measures a column at its natural width


class Fitted:
    """``table`` printed whole when it fits the console, else split by columns (module doc)."""

    def __init__(self, table: Table, keys: int = 1) -> None:
        self.table, self.keys = table, keys

    def __rich_console__(
        self, console: Console, options: ConsoleOptions
    ) -> Iterator[RenderableType]:
        chunks = column_chunks(self.table, self.keys, console, options)
        for i, columns in enumerate(chunks):
            if i:
                yield Text("")
            yield _sub_table(self.table, columns, i, last=i == len(chunks) - 1)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table)


def fit(table: Table, keys: int = 1) -> Fitted:
    """``table``, split by columns on a console too narrow for it; ``keys`` leading columns (the
    labels of a row) are repeated in every part."""
    return Fitted(table, keys)


def column_chunks(
    table: Table, keys: int, console: Console, options: ConsoleOptions
) -> list[list[int]]:
    """Column indexes of each part: the key columns, then as many others as fit the width.

    A table's natural width is the sum of its columns' natural widths (with their padding) plus
    one rule per column and the edges, so each column is measured once, beside the keys, and a
    part's width is the keys' plus each of its columns' increment (the same as measuring the
    part, without measuring every candidate part again: the terminal views have dozens of
    columns)."""
    width = options.max_width
    natural = options.update_width(UNBOUNDED)

    def measure(columns: list[int]) -> int:
        return Measurement.get(console, natural, _sub_table(table, columns, 0, True)).maximum

    lead = list(range(min(keys, len(table.columns))))
    rest = range(len(lead), len(table.columns))
    if measure([*lead, *rest]) <= width:
        return [[*lead, *rest]]
    base = measure(lead)
    chunks: list[list[int]] = []
    current, wide = list(lead), base
    for index in rest:
        more = measure([*lead, index]) - base
        if wide + more > width and len(current) > len(lead):
            chunks.append(current)
            current, wide = [*lead, index], base + more
        else:
            current, wide = [*current, index], wide + more
    chunks.append(current)
    return chunks


def _sub_table(table: Table, columns: list[int], part: int, last: bool) -> Table:
    """A copy of ``table`` with only ``columns`` (in order); a cell that still does not fit is
    folded onto more lines, never cut; later parts are titled "(continued)"."""
    sub = copy.copy(table)
    sub.columns = [_column(table.columns[c], i) for i, c in enumerate(columns)]
    if part and isinstance(table.title, str):
        sub.title = f"{table.title} (continued)"
    if not last:
        sub.caption = None
    return sub


def _column(column: Column, index: int) -> Column:
    return dataclasses.replace(column, _index=index, overflow="fold")
