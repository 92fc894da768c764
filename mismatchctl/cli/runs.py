"""`mismatchctl runs`: list, show and remove the runs of the store."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from mismatchctl import api
from mismatchctl.cli.common import JsonFlag, StoreOpt, emit_json, handle_errors, say
from mismatchctl.cli.common import show as show_sections
from mismatchctl.cli.help_layout import HelpCommand, HelpGroup
from mismatchctl.display import shown
from mismatchctl.errors import UsageError

app = typer.Typer(
    help="""List the runs of the store (with no subcommand), show one, or remove one.

[bold]Examples[/]

  mismatchctl runs

  mismatchctl runs show v1-a100

  mismatchctl runs rm v1-a100

  mismatchctl runs rm v1-a100 --yes

  mismatchctl runs check
""",
    invoke_without_command=True,
    no_args_is_help=False,
    cls=HelpGroup,
)


@app.callback()
@handle_errors
def list_runs(ctx: typer.Context, store: StoreOpt = None, json: JsonFlag = False) -> None:
    """A table of runs: tags, steps, sequences, model tokens, sources, ingested at."""
    if ctx.invoked_subcommand is not None:
        return
    st = api.open_store(store)
    runs = st.runs()
    if json:
        emit_json([_summary(r) for r in runs], "-")
    else:
        show_sections(api.views.runs_sections(runs, str(st)))


@app.command("show", cls=HelpCommand, short_help="Tags and provenance of one run.")
@handle_errors
def show(
    run: Annotated[str, typer.Argument(help="Run name.")],
    store: StoreOpt = None,
    json: JsonFlag = False,
) -> None:
    """Tags and provenance of one run: each source file, format, fingerprint, rows kept/dropped;
    how many sequences have a prompt length (kv_position), and the attributes (attr:NAME split
    keys) with their most frequent values.

    Example: mismatchctl runs show v1-a100
    """
    info = api.run_info(run, store)
    if json:
        emit_json(info, "-")
    else:
        show_sections(api.views.run_sections(info))


@app.command("rm", cls=HelpCommand, short_help="Remove a run: its catalog entry and data.")
@handle_errors
def rm(
    run: Annotated[str, typer.Argument(help="Run name.")],
    yes: Annotated[
        bool,
        typer.Option(
            "--yes", "-y", help="Remove without asking (needed when stdin is not a terminal)."
        ),
    ] = False,
    store: StoreOpt = None,
) -> None:
    """Remove a run: its catalog entry and its data files.

    On a terminal it asks first; --yes removes without asking. Without a terminal (a script, a
    pipe) and without --yes it refuses (exit code 1) rather than wait for an answer.

    Examples: mismatchctl runs rm v1-a100; in a script: mismatchctl runs rm v1-a100 --yes
    """
    if not yes and not _confirmed(api.run_info(run, store, command="runs rm"), store):
        say("Nothing removed.")
        return
    info = api.remove_run(run, store)
    say(
        f"Removed run `{shown(info.name, 200)}` ({info.model_tokens:,} model tokens, "
        f"{len(info.sources)} sources)."
    )


@app.command("check", cls=HelpCommand, short_help="Check that every part of the runs is whole.")
@handle_errors
def check(
    runs: Annotated[
        list[str] | None, typer.Argument(help="Run names (default: every run).")
    ] = None,
    deep: Annotated[
        bool, typer.Option("--deep", help="Also decode every page (reads the whole run).")
    ] = False,
    store: StoreOpt = None,
    json: JsonFlag = False,
) -> None:
    """Check that every part of the runs is on disk, whole, and holds the rows the catalog says.

    Exit code 1 when a part is missing, truncated or corrupt (the message says how to repair it).

    Example: mismatchctl runs check v1-a100 --deep
    """
    found = api.check_runs(runs or [], deep=deep, store=store)
    if json:
        emit_json({run: damage for run, damage in found.items()}, "-")
    else:
        show_sections(api.views.check_sections(found, str(api.open_store(store))))
    api.check_failed(found)


def _confirmed(info: api.RunInfo, store: str | None) -> bool:
    """Ask on the terminal whether to remove the run; refuse when there is no terminal."""
    name = shown(info.name, 80)
    if not _interactive():
        raise UsageError(
            f"`mismatchctl runs rm {name}` asks for confirmation, and stdin is not a terminal",
            f"add --yes to remove it without asking: mismatchctl runs rm {name} --yes",
        )
    where = shown(str(api.open_store(store)), 200)
    question = (
        f"Remove run `{name}` ({info.model_tokens:,} model tokens, {len(info.sources)} sources) "
        f"from the store {where}?"
    )
    return typer.confirm(question, default=False, err=True)


def _interactive() -> bool:
    return sys.stdin.isatty()


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
