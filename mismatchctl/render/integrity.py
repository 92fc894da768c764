"""The table of `mismatchctl runs check`."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from mismatchctl.display import visible
from mismatchctl.render.catalog import no_runs_text
from mismatchctl.store.integrity import Damage


def check_table(found: dict[str, list[Damage]], store: str) -> Table | Text:
    if not found:
        return no_runs_text(store)
    table = Table(show_edge=False, pad_edge=False)
    for name in ("run", "status", "part", "problem"):
        table.add_column(name, overflow="fold")
    for run, damage in found.items():
        if not damage:
            table.add_row(Text(visible(run)), Text("ok", style="green"), "", "")
        for d in damage:
            table.add_row(
                Text(visible(run)),
                Text("damaged", style="red"),
                Text(visible(d.part)),
                Text(visible(d.problem)),
            )
    return table
