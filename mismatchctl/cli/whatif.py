"""`mismatchctl whatif SELECTOR`: what importance-sampling and rejection corrections would do."""

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
from mismatchctl.render.whatif_json import whatif_json
from mismatchctl.render.whatif_terminal import render_whatif

HELP = """What a correction would do to the selection: the share of tokens and sequences each method clips or rejects, the raw and applied weights (mean, std, min, max) and the effective sample size, for the whole selection, each run, turn kind, gpu and step.

Methods (default threshold): token-tis (2), token-mis (2), seq-tis (2), seq-mis (2), geo-rs (0.999_1.001), k3-rs (0.01), veto (1e-4), batch-filter (0.1). Without --method, all of them. Definitions: docs/metrics.md, "Correction what-if".

[bold]Examples[/]

  mismatchctl whatif v1-a100 --method seq-mis --threshold 2

  mismatchctl whatif v1-a100 --method seq-mis:2 --method geo-rs:0.999_1.001 --method veto

  mismatchctl whatif v1-a100 --method seq-mis --sweep 1.5,2,3,5 --html whatif.html

  mismatchctl whatif 'gpu=A100@steps=100..' --json - | jq .whatif.methods

  mismatchctl whatif v1-a100 --method seq-mis --engine ray --workers 8
"""


@handle_errors
def whatif(
    selector: Annotated[
        str, typer.Argument(help="A run, KEY=VALUE[,...] filters, optional @steps=A..B.")
    ],
    method: Annotated[
        list[str] | None,
        typer.Option("--method", "-m", help="A method, or METHOD:THRESHOLD (repeatable)."),
    ] = None,
    threshold: Annotated[
        str | None,
        typer.Option("--threshold", "-t", help="Threshold of the one --method (geo-rs: LO_HI)."),
    ] = None,
    sweep: Annotated[
        str | None,
        typer.Option("--sweep", help="Comma-separated thresholds of the one --method."),
    ] = None,
    json_out: JsonOut = None,
    html_out: HtmlOut = None,
    workers: WorkersOpt = DEFAULT_WORKERS,
    engine: EngineOpt = "local",
    ray_address: RayAddressOpt = None,
    store: StoreOpt = None,
    quiet: QuietFlag = False,
) -> None:
    with TokenProgress(None, enabled=not quiet) as progress:
        result = api.whatif(
            selector,
            methods=method or [],
            threshold=threshold,
            sweep=sweep,
            workers=workers,
            store=store,
            on_part=progress.advance,
            engine=engine,
            ray_address=ray_address,
        )
    from mismatchctl.render.whatif_html import write_whatif_html

    emit_outputs(
        json_out,
        html_out,
        lambda: whatif_json(result),
        lambda: render_whatif(result),
        lambda path: write_whatif_html(result, path),
    )


whatif.__doc__ = HELP
