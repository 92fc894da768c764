"""`mismatchctl whatif SELECTOR`: what importance-sampling and rejection corrections would do."""

from __future__ import annotations

from typing import Annotated

import typer

from mismatchctl import api
from mismatchctl.cli.common import Common, analysis_command
from mismatchctl.errors import UsageError

HELP = """What a correction would do to the selection: the share of tokens and sequences each method clips or rejects, the raw and applied weights (mean, std, min, max) and the effective sample size, for the whole selection, each run, turn kind, gpu and step.

Methods (default threshold): token-tis (2), token-mis (2), seq-tis (2), seq-mis (2), geo-rs (0.999_1.001), k3-rs (0.01), veto (1e-4), batch-filter (0.1). Without --method, all of them. Definitions: docs/metrics.md, "Correction what-if".

--preset computes one framework's correction as its code does, set by its own config keys (--set), with its own metric names; --list-presets lists them with the framework version and the source each follows; an example of each: README.md, `mismatchctl whatif`. A correction that would discard the signal (ESS below 50%, most units rejected) is named "not advised".

[bold]Examples[/]

  mismatchctl whatif v1-a100 --method seq-mis --threshold 2

  mismatchctl whatif v1-a100 --method seq-mis:2 --method geo-rs:0.999_1.001

  mismatchctl whatif v1-a100 --method seq-mis --sweep 1.5,2,3,5 --html w.html

  mismatchctl whatif 'gpu=A100@steps=100..' --json - | jq .whatif.methods

  mismatchctl whatif --list-presets

  mismatchctl whatif v1-a100 --preset slime-tis --set tis_clip=2

  mismatchctl whatif v1 --preset verl-rollout-corr --set rollout_is=sequence
"""


@analysis_command(HELP)
def whatif(
    selector: Annotated[
        str | None,
        typer.Argument(help="A run, KEY=VALUE[,...] filters, optional @steps=A..B."),
    ] = None,
    method: Annotated[
        list[str] | None,
        typer.Option("--method", "-m", help="A method, or METHOD:THRESHOLD (repeatable)."),
    ] = None,
    threshold: Annotated[
        str | None,
        typer.Option("--threshold", "-t", help="Threshold of the one --method (geo-rs: LO_HI)."),
    ] = None,
    sweep: Annotated[
        str | None,
        typer.Option("--sweep", help="Comma-separated thresholds of the one --method."),
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option("--preset", help="A framework's correction (see --list-presets)."),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="KEY=VALUE of the preset, in its framework's keys (repeatable)."
        ),
    ] = None,
    list_presets: Annotated[
        bool, typer.Option("--list-presets", help="List the presets, their versions and sources.")
    ] = False,
    *,
    common: Common,
) -> None:
    if list_presets:
        listed = api.whatif_presets()
        common.emit(listed, api.sections(listed), "mismatchctl what-if presets", "")
        return
    if selector is None:
        raise UsageError("whatif needs a SELECTOR", "name a run, e.g. mismatchctl whatif v1-a100.")
    with common.progress() as progress:
        result = api.whatif(
            selector, methods=method or [], threshold=threshold, sweep=sweep, preset=preset,
            sets=set_ or [], **common.read(progress.advance),
        )  # fmt: skip
    title = f"mismatchctl what-if: {result.label}"
    subtitle = (
        "What importance-sampling and rejection corrections would do to the tokens and "
        "sequences of the selection (docs/metrics.md, Correction what-if)."
    )
    common.emit(result, api.sections(result), title, subtitle)
