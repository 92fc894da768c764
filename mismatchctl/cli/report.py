"""`mismatchctl report`: every metric of one or more runs, in the terminal, JSON and HTML."""

from __future__ import annotations

from typing import Annotated

import typer

from mismatchctl import api
from mismatchctl.cli.common import (
    BinsOpt,
    ClampOpt,
    Common,
    IsBoundsOpt,
    TauOpt,
    analysis_command,
)

HELP = """Every metric of the selected runs (all runs when none is named): vllm_kl and the others, by inference-probability bin, first turn vs turns after tool responses, per step, per gpu, and the training curves (attached with `mismatchctl ingest-metrics`) against per-step vllm_kl.

Runs are named as every analysis command names them: RUN, RUN@steps=A..B, or KEY=VALUE filters (gpu=H20, run=v1,engine=vllm); several selectors read one slice of their runs, so they keep the same steps, gpu and tags.

One run: its headline, bins, turns and steps. Several runs are not pooled unless you ask (--pool): a summary row per run, the bins and turns side by side per run; the HTML page adds each run's own section with its distributions (a run selector picks one).

Metric definitions and JSON names: docs/metrics.md; training curves: docs/curves.md. With [bold]--json -[/] only JSON goes to stdout.

[bold]Examples[/]

  mismatchctl report v1-a100

  mismatchctl report --by-gpu

  mismatchctl report v1-a100 --html report.html --json report.json

  mismatchctl report 'v1-a100@steps=200..' 'v0-ref@steps=200..'   # or --steps 200..

  mismatchctl report v1-a100 --diagnose --html report.html

  mismatchctl report v1-a100 --bins linear:20 --by step --by tag:engine

  mismatchctl report v0-ref v1-a100 --by run,turn_kind --json - | jq .

  mismatchctl report v1-a100 --by kv_position --by turn_kind,turn_position

  mismatchctl report v1-a100 --engine ray --ray-address auto --json r.json

  mismatchctl report v1-a100 --clamp 10 --tau 2 --is-bounds 0.5_2.0
"""
BY_HELP = (
    f"Add a split (repeatable; commas combine keys, e.g. step,turn_kind): {api.SPLIT_KEYS}. "
    "What each key is: README.md, `mismatchctl report`."
)
POSITION_BINS_HELP = (
    "Edges of kv_position, turn_position and length: log2 (0, 1, 2, 4, ..., 2^20) or integer "
    "edges from 0, e.g. 0,512,1024,4096."
)
STEPS_HELP = (
    "Only steps in this inclusive range: A..B (e.g. 0..200, or -6..-5: steps may be negative), "
    "A.., ..B or one step N; A-B still works for steps >= 0."
)


@analysis_command(HELP)
def report(
    runs: Annotated[
        list[str] | None,
        typer.Argument(
            help="Runs or selectors (default: all runs): RUN, RUN@steps=A..B, KEY=VALUE[,...]; "
            "several are one slice (the same steps, gpu and tags for each).",
            show_default=False,
        ),
    ] = None,
    by_gpu: Annotated[
        bool, typer.Option("--by-gpu", help="Add the per-hardware table and gpu x step groups.")
    ] = False,
    by: Annotated[
        list[str] | None,
        typer.Option(
            "--by",
            help=BY_HELP + " `--by layer`: the MoE routing per layer.",
        ),
    ] = None,
    bins: BinsOpt = "log",
    steps: Annotated[str | None, typer.Option("--steps", help=STEPS_HELP)] = None,
    position_bins: Annotated[
        str, typer.Option("--position-bins", help=POSITION_BINS_HELP)
    ] = "log2",
    pool: Annotated[
        bool, typer.Option("--pool", help="Pool the runs' distributions and tables.")
    ] = False,
    diagnose: Annotated[
        bool, typer.Option("--diagnose", help="Also diagnose each run (terminal, JSON, HTML).")
    ] = False,
    clamp: ClampOpt = api.DEFAULT_CLAMP,
    tau: TauOpt = api.DEFAULT_TAU,
    is_bounds: IsBoundsOpt = None,
    *,
    common: Common,
) -> None:
    infos = api.selected_runs(runs or [], common.store)
    tokens = sum(r.model_tokens for r in infos)
    # the diagnoses and the HTML page are phases of their own: a line each on a pipe
    with common.phases(lines=diagnose or common.html_out is not None) as phases:
        phases.start(f"reading {tokens:,} tokens of {len(infos)} runs", tokens, "tokens")
        on_diagnosis = phases.steps("diagnosing {total} runs") if diagnose else None
        rep = api.report(
            runs, bins=bins, by=by or [], by_gpu=by_gpu, steps=steps, diagnose=diagnose,
            position_bins=position_bins, figures=common.html_out is not None, **common.read(phases.advance),
            clamp=clamp, tau=tau, is_bounds=is_bounds, on_diagnosis=on_diagnosis,
        )  # fmt: skip
        title = f"mismatchctl report: {', '.join(rep.selection.names)}"
        common.emit(rep, api.sections(rep, pool=pool), title, SUBTITLE, phases)


SUBTITLE = "Training–inference logprob mismatch: trainer logprobs recomputed by the trainer vs rollout logprobs of the inference engine"
