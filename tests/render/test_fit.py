"""The split of a wide table into parts equals the one found by measuring every candidate part."""

from __future__ import annotations

import random

import pytest
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from mismatchctl.render.fit import UNBOUNDED, _sub_table, column_chunks
from tests.helpers import slow_param


def _measured_chunks(table: Table, keys: int, console: Console) -> list[list[int]]:
    """The oracle: grow a part column by column, measuring the whole candidate part each time."""
    natural = console.options.update_width(UNBOUNDED)
    lead = list(range(min(keys, len(table.columns))))
    chunks: list[list[int]] = []
    current = list(lead)
    for index in range(len(lead), len(table.columns)):
        candidate = [*current, index]
        wide = Measurement.get(console, natural, _sub_table(table, candidate, 0, True)).maximum
        if wide > console.options.max_width and len(current) > len(lead):
            chunks.append(current)
            current = [*lead, index]
        else:
            current = candidate
    chunks.append(current)
    return chunks


@pytest.mark.parametrize("seed", [0, 1, slow_param(2), slow_param(3)])
def test_column_chunks_equal_measuring_every_part(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(60):
        table = Table(
            title="bins",
            caption="note" if rng.random() < 0.5 else None,
            show_lines=rng.random() < 0.3,
        )
        n = rng.randint(1, 14)
        for _ in range(n):
            table.add_column(
                "h" * rng.randint(1, 12),
                justify=rng.choice(["left", "right"]),
                max_width=rng.choice([None, None, 20]),
            )
        for _ in range(rng.randint(0, 4)):
            table.add_row(
                *[
                    " ".join(["word"] * rng.randint(0, 8)) or "9" * rng.randint(1, 30)
                    for _ in range(n)
                ]
            )
        console = Console(width=rng.randint(10, 200), record=True)
        keys = rng.randint(0, 3)
        found = column_chunks(table, keys, console, console.options)
        assert found == _measured_chunks(table, keys, console)
        assert sorted({c for part in found for c in part}) == list(range(n))
