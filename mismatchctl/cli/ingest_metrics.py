"""`mismatchctl ingest-metrics`: per-step training metrics from a training log into a run."""

from __future__ import annotations

from typing import Annotated

import typer

from mismatchctl import api
from mismatchctl.cli.common import JsonFlag, StoreOpt, emit_json, handle_errors, show

HELP = """Attach per-step training metrics (the training curves) to a run of the store.

Reads a W&B history export (CSV), JSON lines of {"step": N, "name": value, ...} (nested objects are flattened with `/`), or a TensorBoard log directory (needs the `tensorboard` extra). `report`, `compare` and `diagnose` then join the curves to the per-step mismatch: correlations, lead-lag, overlays, spikes. The run must exist (ingest its dumps first). All or nothing, and the same log read the same way is ingested once; a value that differs from one the run already has for the same step and metric is refused unless --replace.

[bold]Examples[/]

  mismatchctl ingest-metrics wandb_export.csv --run v1-a100

  mismatchctl ingest-metrics m.jsonl --run v1 --metric gn=actor/grad_norm

  mismatchctl ingest-metrics tb/ --run v1-a100 --format tensorboard --replace
"""


@handle_errors
def ingest_metrics(
    path: Annotated[
        str, typer.Argument(help="CSV or JSONL file, TensorBoard event file or log directory.")
    ],
    run: Annotated[str, typer.Option("--run", "-r", help="The run the metrics belong to.")],
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            "-M",
            help="NAME=SOURCE to keep SOURCE under the name NAME, or a name or glob pattern to "
            "keep as is (repeatable). With any --metric only what they select is kept.",
        ),
    ] = None,
    step_column: Annotated[
        str | None,
        typer.Option(
            "--step-column", help="The column or key that holds the step (default: detected)."
        ),
    ] = None,
    fmt: Annotated[
        str | None, typer.Option("--format", "-f", help="Force a format: csv, jsonl, tensorboard.")
    ] = None,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="Replace every value the run already has of the metrics this log brings.",
        ),
    ] = False,
    store: StoreOpt = None,
    json: JsonFlag = False,
) -> None:
    result = api.ingest_metrics(
        path,
        run,
        metrics=metric or [],
        step_column=step_column,
        fmt=fmt,
        replace=replace,
        store=store,
    )
    if json:
        emit_json(api.views.metrics_ingest_dict(result), "-")
    else:
        show(api.views.metrics_ingest_sections(result), stderr=True)


ingest_metrics.__doc__ = HELP
