"""`mismatchctl runs`: list, show and remove the runs of the store."""

from __future__ import annotations

from typing import Annotated

import typer

from mismatchctl import api
from mismatchctl.cli.common import JsonFlag, StoreOpt, emit_json, err_console, handle_errors
from mismatchctl.cli.common import out_console as console
from mismatchctl.render.catalog import run_detail, runs_table

app = typer.Typer(
    help="""List the runs of the store (with no subcommand), show one, or remove one.

[bold]Examples[/]

  mismatchctl runs

  mismatchctl runs show v1-a100

  mismatchctl runs rm v1-a100
""",
    invoke_without_command=True,
    no_args_is_help=False,
)


@app.callback()
@handle_errors
def list_runs(ctx: typer.Context, store: StoreOpt = None, json: JsonFlag = False) -> None:
    """A table of runs: tags, steps, sequences, model tokens, sources, ingested at."""
    if ctx.invoked_subcommand is not None:
        return
    runs = api.runs(store)
    if json:
        emit_json([_summary(r) for r in runs], "-")
    else:
        console().print(runs_table(runs))


@app.command("show")
@handle_errors
def show(
    run: Annotated[str, typer.Argument(help="Run name.")],
    store: StoreOpt = None,
    json: JsonFlag = False,
) -> None:
    """Tags and provenance of one run: each source file, format, fingerprint, rows kept/dropped.

    Example: mismatchctl runs show v1-a100
    """
    info = api.run_info(run, store)
    if json:
        emit_json(info, "-")
    else:
        console().print(run_detail(info), soft_wrap=True)


@app.command("rm")
@handle_errors
def rm(
    run: Annotated[str, typer.Argument(help="Run name.")],
    store: StoreOpt = None,
) -> None:
    """Remove a run: its catalog entry and its data files.

    Example: mismatchctl runs rm v1-a100
    """
    info = api.remove_run(run, store)
    err_console().print(
        f"Removed run `{info.name}` ({info.model_tokens:,} model tokens, "
        f"{len(info.sources)} sources).",
        highlight=False,
        markup=False,
    )


def _summary(r: api.RunInfo) -> dict:
    return {
        "run": r.name,
        "tags": r.tags,
        "steps": r.steps,
        "gpus": r.gpus,
        "sequences": r.sequences,
        "empty_sequences": r.empty_sequences,
        "model_tokens": r.model_tokens,
        "tool_tokens": r.tool_tokens,
        "dropped_sequences": r.dropped_sequences,
        "sources": len(r.sources),
        "ingested_at": r.ingested_at,
    }
