"""`mismatchctl compare A B`: two runs, or two slices of the store, side by side."""

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
from mismatchctl.cli.report import BY_HELP, POSITION_BINS_HELP

HELP = """Compare two runs, or two slices of the store: the tags that differ, every headline metric side by side with 95% bootstrap intervals (whole sequences resampled, fixed seed), and where they differ: probability bins, turn kinds, gpus, steps, and any --by split (kv_position, turn_position, length, order, attr:<name>...); and both sides' training curves (from `mismatchctl ingest-metrics`) aligned on step.

When both sides hold the same responses (the same token ids for the same step and sample id), the comparison is also paired, response by response: the share of identical responses, vllm_kl over the pairs with a paired-bootstrap interval of B - A and B / A, the per-sequence differences and the pairs that differ most; otherwise it says why it cannot pair. Two sides that hold the same data (two copies of a run) print `identical: no difference` and exit 0.

A selector is a run name, KEY=VALUE filters (run, gpu, or any tag; commas combine), and an optional @steps=A..B.

[bold]Examples[/]

  mismatchctl compare v0-ref v1-initial

  mismatchctl compare gpu=H20 gpu=L20

  mismatchctl compare v0-ref v1-initial --by kv_position --by attr:task

  mismatchctl compare v0-ref 'v1-final@steps=0..200' --html cmp.html

  mismatchctl compare v0-ref v1 --engine ray --ray-address ray://head:10001
"""


@analysis_command(HELP)
def compare(
    a: Annotated[str, typer.Argument(help="Side A: run, KEY=VALUE[,...], optional @steps=A..B.")],
    b: Annotated[str, typer.Argument(help="Side B, same syntax.")],
    bins: BinsOpt = "log",
    resamples: Annotated[
        int, typer.Option("--resamples", help="Bootstrap resamples for the intervals.")
    ] = api.DEFAULT_RESAMPLES,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed.")] = api.DEFAULT_SEED,
    by: Annotated[
        list[str] | None, typer.Option("--by", help=BY_HELP + " Both sides side by side.")
    ] = None,
    position_bins: Annotated[
        str, typer.Option("--position-bins", help=POSITION_BINS_HELP)
    ] = "log2",
    clamp: ClampOpt = api.DEFAULT_CLAMP,
    tau: TauOpt = api.DEFAULT_TAU,
    is_bounds: IsBoundsOpt = None,
    *,
    common: Common,
) -> None:
    with common.progress() as progress:
        result = api.compare(
            a, b, bins=bins, resamples=resamples, seed=seed, by=by or [],
            position_bins=position_bins, figures=common.html_out is not None, **common.read(progress.advance),
            clamp=clamp, tau=tau, is_bounds=is_bounds,
        )  # fmt: skip
    common.emit(
        result, api.sections(result), f"mismatchctl compare: {a} vs {b}", f"A = {a}, B = {b}"
    )
