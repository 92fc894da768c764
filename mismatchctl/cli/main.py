"""The `mismatchctl` command: one module per subcommand, registered here."""

from __future__ import annotations

from typing import Annotated

import typer

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
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("ingest", help=ingest_cmd.HELP)(ingest_cmd.ingest)
app.command("watch", help=watch_cmd.HELP)(watch_cmd.watch)
app.command("ingest-metrics", help=ingest_metrics_cmd.HELP)(ingest_metrics_cmd.ingest_metrics)
app.add_typer(runs_cmd.app, name="runs")
app.command("report", help=report_cmd.HELP)(report_cmd.report)
app.command("compare", help=compare_cmd.HELP)(compare_cmd.compare)
app.command("explain", help=explain_cmd.HELP)(explain_cmd.explain)
app.command("diagnose", help=diagnose_cmd.HELP)(diagnose_cmd.diagnose)
app.command("whatif", help=whatif_cmd.HELP)(whatif_cmd.whatif)
app.command("check", help=check_cmd.HELP)(check_cmd.check)
app.command("tokens", help=tokens_cmd.HELP)(tokens_cmd.tokens)
app.command("show", help=show_cmd.HELP)(show_cmd.show)
app.command("certify", help=certify_cmd.HELP)(certify_cmd.certify)
app.command("demo", help=demo_cmd.HELP)(demo_cmd.demo)


def _version(value: bool) -> None:
    if value:
        from mismatchctl import __version__

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
