"""`mismatchctl demo`: ingest the bundled sample data into a fresh store and show it."""

from __future__ import annotations

from typing import Annotated

import typer

from mismatchctl.cli.common import err_console, handle_errors, out_console
from mismatchctl.cli.progress import IngestProgress
from mismatchctl.demo import ingest_demo, load_manifest
from mismatchctl.render.catalog import runs_table
from mismatchctl.store import open_store

HELP = """Ingest the bundled sample data (sample_data/) into a store and show what it holds.

Which runs are captured from a real model's two numeric paths and which are synthetic is said in sample_data/README.md. Running it again is a no-op for runs already ingested.

[bold]Examples[/]

  mismatchctl demo

  mismatchctl demo --store /tmp/demo-store
"""


@handle_errors
def demo(
    store: Annotated[
        str, typer.Option("--store", help="Store directory for the demo runs.")
    ] = "mismatchctl-demo/store",
    data: Annotated[
        str | None, typer.Option("--data", help="Sample data directory (holds manifest.json).")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    runs = load_manifest(data)
    st = open_store(store)
    with IngestProgress(enabled=not quiet) as progress:
        ingest_demo(st, runs, progress)
    console = err_console()
    for run in runs:
        kind = "captured" if run.captured else "SYNTHETIC"
        console.print(f"  {run.name:<16} {kind:<9} {run.shows}", highlight=False, markup=False)
    out_console().print(runs_table(st.runs()))
    console.print(f"Store: {st.root}", highlight=False, markup=False)


demo.__doc__ = HELP
