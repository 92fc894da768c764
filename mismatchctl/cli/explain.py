"""`mismatchctl explain TARGET [--baseline REF]`: where the mismatch lives, and what explains it."""

from __future__ import annotations

from typing import Annotated

import typer

from mismatchctl import api
from mismatchctl.cli.common import BinsOpt, Common, SelectorArg, analysis_command

HELP = """Where the mismatch of a selection lives, and what explains its difference from a baseline.

With --baseline (a run, a slice such as gpu=H20, or the same run's earlier steps such as 'v1@steps=0..50'): the target's K3 excess over what the baseline's per-cell rates predict at the same token mix, localized to cells (conjunctions of up to three values of run, step, gpu, sequence length, order in the step, turn, turn kind, probability bin, KV position, position in the turn), each with its token share, its share of the excess, its rate ratio against the baseline and 95% intervals (delta method, and a bootstrap over whole sequences); the dimensions that explain nothing (an excess spread over every value points at the policy, e.g. stale weights, not at a code path); and the change of vllm_kl split into mix (the tokens moved between cells) and rate (the cells themselves got worse) along each dimension. A significant excess always comes with where it lives: when no cell is a finding because a few sequences hold it (a finding needs 10 sequences' worth of K3), the cells that carry it are listed as leads with how few sequences hold them; an excess every dimension spreads evenly is said to be uniform over the whole selection.

Without a baseline: where the K3 mass concentrates, each cell against the rest of the selection at the same token probabilities (low-probability tokens always carry more K3: the comparison takes that out), and the raw lift table.

A run of more than 32 steps has its steps searched as ranges and regimes (a change point, an interval, every k-th step), and a set of many values is named by its structure ('19-199: 15 of 181, in 7 short bursts'); the JSON's where keeps every range.

Either way, and for the baseline too: length scaling, whether a response's sum of r grows like sqrt(T) (independent per-token noise: numerics) or like T (a per-token bias: semantics or another policy), the slope of log RMS(sum r) on log T with its bootstrap interval and the sums by length (diagnose's length_scaling).

What it computes from each part of the store is kept in the part cache, so a second view of the same parts reads those states instead of the tokens (`ingest --warm` fills it ahead; README, Speed: where it lives, `$MISMATCHCTL_CACHE_MB=0` turns it off).

Algorithm and constants: docs/explain.md.

[bold]Examples[/]

  mismatchctl explain v1-a100 --baseline v0-ref

  mismatchctl explain 'v1@steps=200..' --baseline 'v1@steps=0..50'

  mismatchctl explain 'v1@steps=900..999' --baseline 'v1@steps=0..99'   (a rise: mix or rate, and where)

  mismatchctl explain gpu=A100 --baseline gpu=H20 --html explain.html

  mismatchctl explain v1-a100 --json - | jq '.explain.findings[].sentence'
"""


@analysis_command(HELP)
def explain(
    target: SelectorArg,
    baseline: Annotated[
        str | None,
        typer.Option("--baseline", "-b", help="The reference: a selector (same syntax)."),
    ] = None,
    bins: BinsOpt = "log",
    no_bootstrap: Annotated[
        bool,
        typer.Option(
            "--no-bootstrap", help="No sequence-bootstrap intervals (delta intervals only)."
        ),
    ] = False,
    *,
    common: Common,
) -> None:
    with common.progress() as progress:
        result = api.explain(
            target, baseline, bins=bins, bootstrap=not no_bootstrap, **common.read(progress.advance)
        )
    title = f"mismatchctl explain: {target}" + (f" against {baseline}" if baseline else "")
    common.emit(result, api.sections(result), title, "Where the training-inference mismatch lives")
