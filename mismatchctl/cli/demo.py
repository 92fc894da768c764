"""`mismatchctl demo`: ingest the bundled sample data into a store, report on it, write the HTML."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mismatchctl import api
from mismatchctl.api import DEFAULT_WORKERS
from mismatchctl.cli.common import QuietFlag, err_console, handle_errors, out_console
from mismatchctl.cli.progress import IngestProgress, TokenProgress
from mismatchctl.cli.report import run_diagnoses
from mismatchctl.render.report_terminal import render_report
from mismatchctl.sample_runs import ingest_demo, load_manifest
from mismatchctl.store import open_store
from mismatchctl.store.location import DEMO_STORE, point_at

HELP = """Ingest the bundled sample data (sample_data/) into a store, print `report --by-gpu` for all its runs and write the HTML report (with a diagnosis of each run).

The demo's store is not the default store of the other commands: point them at it with --store mismatchctl-demo/store, or export MISMATCHCTL_STORE=$PWD/mismatchctl-demo/store.

Which runs are captured from a real model's two numeric paths and which are synthetic is said in the output and in sample_data/README.md. Running it again reuses the runs already ingested.

[bold]Examples[/]

  mismatchctl demo

  mismatchctl demo --store /tmp/demo-store --html /tmp/demo.html
"""


@handle_errors
def demo(
    store: Annotated[str, typer.Option("--store", help="Store directory for the demo runs.")] = str(
        DEMO_STORE
    ),
    html: Annotated[
        str | None,
        typer.Option("--html", help="HTML report path (default: report.html beside the store)."),
    ] = None,
    data: Annotated[
        str | None, typer.Option("--data", help="Sample data directory (holds manifest.json).")
    ] = None,
    quiet: QuietFlag = False,
) -> None:
    runs = load_manifest(data)
    st = open_store(store)
    with IngestProgress(enabled=not quiet) as progress:
        ingest_demo(st, runs, progress)
    names = [r.name for r in runs]
    with TokenProgress(sum(st.run(n).model_tokens for n in names), enabled=not quiet) as progress:
        rep = api.report(names, by_gpu=True, store=st.root, on_part=progress.advance, figures=True)
    out_console().print(render_report(rep))
    from mismatchctl.render.report_html import write_report_html

    target = Path(html) if html else st.root.parent / "report.html"
    write_report_html(rep, str(target), run_diagnoses(names, None, DEFAULT_WORKERS, str(st.root)))
    console = err_console()
    console.print("Sample runs:", style="bold")
    for run in runs:
        kind = "captured" if run.captured else "SYNTHETIC"
        console.print(f"  {run.name:<16} {kind:<9} {run.shows}", highlight=False, markup=False)
    console.print(f"Store: {st.root}", highlight=False, markup=False, soft_wrap=True)
    console.print(f"HTML report: {target.resolve()}", highlight=False, markup=False, soft_wrap=True)
    console.print(
        f"The other commands read another store unless told: {point_at(store)} "
        f"(e.g. `mismatchctl runs --store {store}`).",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


demo.__doc__ = HELP
