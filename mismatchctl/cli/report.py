"""`mismatchctl report`: every metric of one or more runs, in the terminal, JSON and HTML."""

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
    emit_json,
    handle_errors,
    out_console,
    wrote,
)
from mismatchctl.cli.progress import TokenProgress
from mismatchctl.render.diagnose_json import diagnosis_section
from mismatchctl.render.diagnose_terminal import render_diagnosis
from mismatchctl.render.report_json import report_json
from mismatchctl.render.report_terminal import render_report

HELP = """Every metric of the selected runs (all runs when none is named): vllm_kl and the others, by inference-probability bin, first turn vs turns after tool responses, per step, per gpu, and the training curves (attached with `mismatchctl ingest-metrics`) against per-step vllm_kl.

Metric definitions and JSON names: docs/metrics.md; training curves: docs/curves.md. With [bold]--json -[/] only JSON goes to stdout.

[bold]Examples[/]

  mismatchctl report v1-a100

  mismatchctl report --by-gpu

  mismatchctl report v1-a100 --html report.html --json report.json

  mismatchctl report v1-a100 --diagnose --html report.html

  mismatchctl report v1-a100 --bins linear:20 --by step --by tag:logprobs_mode

  mismatchctl report v0-ref v1-a100 --by run,turn_kind --json - | jq .

  mismatchctl report v1-a100 --engine ray --ray-address auto --json report.json
"""


@handle_errors
def report(
    runs: Annotated[
        list[str] | None, typer.Argument(help="Runs to report on (default: all).")
    ] = None,
    by_gpu: Annotated[
        bool,
        typer.Option("--by-gpu", help="Add the per-hardware table and gpu, gpu x step groups."),
    ] = False,
    by: Annotated[
        list[str] | None,
        typer.Option(
            "--by",
            help="Add a split (repeatable): run, gpu, step, turn_kind, turn, bin or tag:<name>; "
            "commas combine keys, e.g. step,turn_kind.",
        ),
    ] = None,
    bins: Annotated[
        str,
        typer.Option("--bins", help="Probability bins: log, linear:N, or edges like 0,1e-3,0.5,1."),
    ] = "log",
    steps: Annotated[
        str | None,
        typer.Option(
            "--steps",
            help="Only steps in this inclusive range: A..B (e.g. 0..200, or -6..-5: steps may be "
            "negative), A.., ..B or one step N; A-B still works for steps >= 0.",
        ),
    ] = None,
    json_out: JsonOut = None,
    html_out: HtmlOut = None,
    diagnose: Annotated[
        bool,
        typer.Option("--diagnose", help="Also run `diagnose` on each run (terminal, JSON, HTML)."),
    ] = False,
    workers: WorkersOpt = DEFAULT_WORKERS,
    engine: EngineOpt = "local",
    ray_address: RayAddressOpt = None,
    store: StoreOpt = None,
    quiet: QuietFlag = False,
) -> None:
    total = sum(r.model_tokens for r in _runs(runs, store))
    with TokenProgress(total, enabled=not quiet) as progress:
        rep = api.report(
            runs,
            bins=bins,
            by=by or [],
            by_gpu=by_gpu,
            steps=steps,
            workers=workers,
            store=store,
            on_part=progress.advance,
            figures=html_out is not None,
            engine=engine,
            ray_address=ray_address,
        )
    diagnoses = (
        run_diagnoses(rep.selection.names, steps, workers, store, engine, ray_address)
        if diagnose
        else []
    )
    if json_out is not None:
        doc = report_json(rep)
        if diagnoses:
            doc["diagnosis"] = {d.report.selection.label: diagnosis_section(d) for d in diagnoses}
        emit_json(doc, json_out)
    if json_out != "-":
        out_console().print(render_report(rep), *[render_diagnosis(d) for d in diagnoses])
    if html_out is not None:
        from mismatchctl.render.report_html import write_report_html

        write_report_html(rep, html_out, diagnoses)
        wrote(html_out)
    if json_out not in (None, "-"):
        wrote(json_out)


def run_diagnoses(
    runs: list[str],
    steps: str | None,
    workers: int,
    store: str | None,
    engine: str = "local",
    ray_address: str | None = None,
) -> list[api.Diagnosis]:
    """One diagnosis per run (of the same step range)."""
    suffix = f"@steps={steps}" if steps else ""
    return [
        api.diagnose(
            run + suffix, workers=workers, store=store, engine=engine, ray_address=ray_address
        )
        for run in runs
    ]


def _runs(names: list[str] | None, store: str | None) -> list[api.RunInfo]:
    if names:
        return [api.run_info(n, store) for n in names]
    return api.runs(store)


report.__doc__ = HELP
