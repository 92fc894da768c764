"""`mismatchctl compare A B`: two runs, or two slices of the store, side by side."""

from __future__ import annotations

from typing import Annotated

import typer

from mismatchctl import api
from mismatchctl.api import DEFAULT_WORKERS
from mismatchctl.cli.common import (
    EngineOpt,
    HtmlOut,
    JsonOut,
    QuietFlag,
    RayAddressOpt,
    StoreOpt,
    WorkersOpt,
    emit_outputs,
    handle_errors,
)
from mismatchctl.cli.progress import TokenProgress
from mismatchctl.render.compare_json import comparison_json
from mismatchctl.render.compare_terminal import render_comparison
from mismatchctl.stats.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED

HELP = """Compare two runs, or two slices of the store: the tags that differ, every headline metric side by side with 95% bootstrap intervals (whole sequences resampled, fixed seed), and where they differ: probability bins, turn kinds, gpus, steps; and both sides' training curves (from `mismatchctl ingest-metrics`) aligned on step.

A selector is a run name, KEY=VALUE filters (run, gpu, or any tag; commas combine), and an optional @steps=A..B.

[bold]Examples[/]

  mismatchctl compare v0-ref v1-initial

  mismatchctl compare gpu=H20 gpu=L20

  mismatchctl compare v0-ref 'v1-final@steps=0..200' --html cmp.html --json cmp.json

  mismatchctl compare v0-ref v1-initial --engine ray --ray-address ray://head:10001
"""


@handle_errors
def compare(
    a: Annotated[str, typer.Argument(help="Side A: run, KEY=VALUE[,...], optional @steps=A..B.")],
    b: Annotated[str, typer.Argument(help="Side B, same syntax.")],
    bins: Annotated[
        str, typer.Option("--bins", help="Probability bins: log, linear:N or edges.")
    ] = "log",
    resamples: Annotated[
        int, typer.Option("--resamples", help="Bootstrap resamples for the intervals.")
    ] = DEFAULT_RESAMPLES,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed.")] = DEFAULT_SEED,
    json_out: JsonOut = None,
    html_out: HtmlOut = None,
    workers: WorkersOpt = DEFAULT_WORKERS,
    engine: EngineOpt = "local",
    ray_address: RayAddressOpt = None,
    store: StoreOpt = None,
    quiet: QuietFlag = False,
) -> None:
    with TokenProgress(None, enabled=not quiet) as progress:
        cmp = api.compare(
            a,
            b,
            bins=bins,
            resamples=resamples,
            seed=seed,
            workers=workers,
            store=store,
            on_part=progress.advance,
            figures=html_out is not None,
            engine=engine,
            ray_address=ray_address,
        )
    from mismatchctl.render.compare_html import write_comparison_html

    emit_outputs(
        json_out,
        html_out,
        lambda: comparison_json(cmp),
        lambda: render_comparison(cmp),
        lambda path: write_comparison_html(cmp, path),
    )


compare.__doc__ = HELP
