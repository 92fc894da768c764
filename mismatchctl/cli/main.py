"""The `mismatchctl` command: one module per subcommand, registered here."""

from __future__ import annotations

from typing import Annotated

import typer

from mismatchctl.cli import bisect as bisect_cmd
from mismatchctl.cli import certify as certify_cmd
from mismatchctl.cli import check as check_cmd
from mismatchctl.cli import compare as compare_cmd
from mismatchctl.cli import demo as demo_cmd
from mismatchctl.cli import diagnose as diagnose_cmd
from mismatchctl.cli import explain as explain_cmd
from mismatchctl.cli import ingest as ingest_cmd
from mismatchctl.cli import ingest_metrics as ingest_metrics_cmd
from mismatchctl.cli import report as report_cmd
from mismatchctl.cli import runs as runs_cmd
from mismatchctl.cli import show as show_cmd
from mismatchctl.cli import tokens as tokens_cmd
from mismatchctl.cli import watch as watch_cmd
from mismatchctl.cli import whatif as whatif_cmd
from mismatchctl.cli.help_layout import HelpCommand, HelpGroup

app = typer.Typer(
    name="mismatchctl",
    help="""Forensics for the training-inference logprob mismatch of LLM reinforcement learning.

Load per-step dumps of rollout (inference) and trainer logprobs into a local store, then dissect the mismatch.

[bold]Examples[/]

  mismatchctl ingest dumps/ --run v1-a100 --tag gpu=A100

  mismatchctl watch /shared/dumps/run7 --run run7 --alerts alerts.jsonl

  mismatchctl ingest-metrics wandb_export.csv --run v1-a100

  mismatchctl runs

  mismatchctl report --by-gpu

  mismatchctl compare v0-ref v1-a100

  mismatchctl explain v1-a100 --baseline v0-ref

  mismatchctl diagnose v1-a100

  mismatchctl whatif v1-a100 --method seq-mis --threshold 2

  mismatchctl check v1-a100 --max vllm_kl=1e-3 --junit mismatch.xml

  mismatchctl tokens v1-a100 --where turn_kind=later

  mismatchctl show v1-a100 SAMPLE_ID --html seq.html

  mismatchctl certify v2-batch-invariant

  mismatchctl demo
""",
    no_args_is_help=True,
    cls=HelpGroup,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
# one line each in the command list of `mismatchctl --help` (each command's --help says more)
COMMANDS = (
    ("ingest", ingest_cmd, "Read dump files into a run of the store."),
    ("watch", watch_cmd, "Ingest a running job's dumps as they come: a line per step."),
    ("ingest-metrics", ingest_metrics_cmd, "Attach training curves (W&B, JSON, TensorBoard)."),
    ("runs", runs_cmd, "List, show, check or remove the runs of the store."),
    ("report", report_cmd, "Every metric of runs: bins, turns, steps, gpus, curves."),
    ("compare", compare_cmd, "Two runs or slices side by side, with bootstrap intervals."),
    ("explain", explain_cmd, "Where the mismatch lives; its excess over a baseline."),
    ("diagnose", diagnose_cmd, "Every check, layer by layer, and the likely cause."),
    ("whatif", whatif_cmd, "What importance-sampling corrections would clip or reject."),
    ("check", check_cmd, "A CI gate: thresholds on metrics; exit 3 when one fails."),
    ("tokens", tokens_cmd, "The worst tokens or sequences of a selection, exact."),
    ("show", show_cmd, "One sequence, token by token, coloured by |r|."),
    ("certify", certify_cmd, "Bitwise parity of both sides, and where it breaks."),
    ("bisect", bisect_cmd, "Which component makes the mismatch: tokens re-scored per setting."),
    ("demo", demo_cmd, "The bundled sample runs: ingested, reported, as HTML."),
)
for name, module, short in COMMANDS:
    if module is runs_cmd:  # a group of subcommands
        app.add_typer(runs_cmd.app, name=name, short_help=short)
        continue
    function = getattr(module, name.replace("-", "_"))
    app.command(name, help=module.HELP, short_help=short, cls=HelpCommand)(function)


def _version(value: bool) -> None:
    if value:
        from mismatchctl.version import __version__

        typer.echo(f"mismatchctl {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Forensics for the training-inference logprob mismatch of LLM reinforcement learning."""
