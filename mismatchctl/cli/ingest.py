"""`mismatchctl ingest`: read dump files into a run of the store."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from mismatchctl import api
from mismatchctl.api import DEFAULT_WORKERS, FORMATS, IngestOptions
from mismatchctl.cli.common import (
    STORE_PANEL,
    EngineOpt,
    JsonFlag,
    QuietFlag,
    RayAddressOpt,
    StoreOpt,
    emit_json,
    handle_errors,
    say,
    show,
)
from mismatchctl.cli.reading import RunOpt, reading_options

HELP = f"""Read dump files (files, directories or globs; s3:// and gs:// too) into a run of the store.

Formats are detected from columns and keys: {", ".join(FORMATS)}. Only model tokens are stored (mask = 1); all files are ingested or none is, and the same content again is a no-op. A dump without a response mask is read by verl's attention_mask, or refused when it ends in padding (--allow-padding). A .pt file loads with weights_only=True; --trust-pickle RUNS ANY CODE THE FILE CONTAINS, and reads verl DataProto pickles with a restricted unpickler.

Every rule (masks, padding, prompt lengths, attributes, validation, pickles, MoE routes): README.md, "mismatchctl ingest"; what each framework dumps: docs/frameworks.md.

[bold]Examples[/]

  mismatchctl ingest dumps/ --run v1-a100 --tag gpu=A100

  mismatchctl ingest 'slime_debug/train_*.pt' --run slime-h20 --tag gpu=H20

  mismatchctl ingest 'verl_dumps/step_*.pkl' --run verl-h20 --trust-pickle

  mismatchctl ingest b.parquet --run x --map rollout=gen_lp --map mask=keep

  mismatchctl ingest /shared/dumps/ --run v2 --engine ray

  mismatchctl ingest 's3://bucket/rl/dumps/step_*.parquet' --run v3

  mismatchctl ingest dumps/ --run v1 --warm    # then report, explain, diagnose read no tokens
"""

WARM_HELP = (
    "After the ingest, read the run once for report, explain and diagnose (as each reads it by "
    "default) and keep their states in the part cache: those views then read states instead "
    "of tokens. Parts already kept are not read again."
)


@handle_errors
@reading_options
def ingest(
    inputs: Annotated[
        list[str],
        typer.Argument(help="Dump files, directories or globs; or s3:// / gs:// URIs of them."),
    ],
    run: RunOpt,
    *,
    reading: IngestOptions,
    engine: EngineOpt = "local",
    ray_address: RayAddressOpt = None,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            help="With --engine ray and no cluster: the CPUs of the local Ray.",
            rich_help_panel=STORE_PANEL,
        ),
    ] = DEFAULT_WORKERS,
    store: StoreOpt = None,
    warm: Annotated[bool, typer.Option("--warm", help=WARM_HELP)] = False,
    json: JsonFlag = False,
    quiet: QuietFlag = False,
) -> None:
    from mismatchctl.cli.progress import IngestProgress  # rich.progress: 25 ms

    with IngestProgress(enabled=not quiet) as progress:
        result = api.ingest(
            inputs,
            run,
            options=reading,
            store=store,
            progress=progress,
            engine=engine,
            ray_address=ray_address,
            workers=workers,
        )
    warmed = _warm(run, store, engine, ray_address, workers, quiet) if warm else None
    if json:
        payload = api.views.ingest_dict(result)
        if warmed is not None:
            payload["warm"] = warmed.to_dict()
        emit_json(payload, "-")
        for warning in result.warnings:  # the summary says them; with --json, stderr does
            say(f"Warning: {warning}", "yellow")
    else:
        show(api.views.ingest_sections(result), stderr=True)
    if warmed is not None and warmed.directory is not None and not quiet:
        took = sum(warmed.seconds.values())
        say(f"Part cache warmed for report, explain and diagnose of {run} in {took:.1f} s")


def _warm(
    run: str, store: str | None, engine: str, ray_address: str | None, workers: int, quiet: bool
) -> Any:
    """``--warm``: the run read for the three views, with a reading bar; a warning when the
    part cache is off (nothing is read then)."""
    from mismatchctl.cli.progress import TokenProgress

    with TokenProgress(None, enabled=not quiet) as progress:
        warmed = api.warm(
            run, store=store, on_part=progress.advance, engine=engine,
            ray_address=ray_address, workers=workers,
        )  # fmt: skip
    if warmed.directory is None:
        say(
            "Warning: --warm: the part cache is off ($MISMATCHCTL_CACHE_MB is 0, or no cache "
            "directory could be used): nothing was read",
            "yellow",
        )
    return warmed


ingest.__doc__ = HELP
