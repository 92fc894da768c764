"""`mismatchctl check SELECTOR`: thresholds on a selection's metrics as a gate for CI and
training scripts; exit code 3 when one is not met."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from mismatchctl import api
from mismatchctl.cli.common import Common, SelectorArg, analysis_command, say
from mismatchctl.cli.diagnose import EXIT_CHECK_FAILED
from mismatchctl.errors import UsageError

HELP = f"""Judge a selection against thresholds on its metrics, as a gate for CI and training scripts: each threshold (and, with --diagnose, each check of `mismatchctl diagnose`) is a test case, written as JUnit XML with --junit FILE, which CI systems display.

--max METRIC=VALUE and --min METRIC=VALUE (repeatable) take any metric a selection has: {", ".join(api.gated_metrics())} (docs/metrics.md). A metric without a value for the selection (e.g. an overflow) fails its threshold: the gate fails closed.

Default thresholds, from the severity bands of a batch's vllm_kl (low <= 1e-3 < medium <= 2e-2 < high <= 1e-1 < severe): vllm_kl <= 2e-2 (the selection within the medium band) and vllm_kl_step_max <= 1e-1 (no severe batch). A threshold of the same metric and direction replaces its default; --no-defaults drops them. --thresholds FILE.toml holds \\[max] and \\[min] tables (`vllm_kl = 1e-3`); --max and --min given on the command line replace the file's.

With --diagnose a diagnose check that fails is a failure, one that cannot apply (n/a) is skipped, one that warns passes (its finding in the test case's output).

Exit code 0 when every threshold is met (and no diagnose check fails), 3 otherwise (as `diagnose`); 1 on an error, 2 on a usage error.

[bold]Examples[/]

  mismatchctl check v1-a100

  mismatchctl check v1-a100 --max vllm_kl=1e-3 --junit mismatch.xml

  mismatchctl check 'v1@steps=200..' --thresholds ci/mismatch.toml --diagnose

  mismatchctl check gpu=H20 --min prob_pearson=0.999 --json - | jq .check
"""


@analysis_command(HELP)
def check(
    selector: SelectorArg,
    max_: Annotated[
        list[str] | None,
        typer.Option("--max", metavar="METRIC=VALUE", help="The metric must be at most VALUE."),
    ] = None,
    min_: Annotated[
        list[str] | None,
        typer.Option("--min", metavar="METRIC=VALUE", help="The metric must be at least VALUE."),
    ] = None,
    thresholds: Annotated[
        str | None,
        typer.Option("--thresholds", metavar="FILE", help="TOML with \\[max] and \\[min] tables."),
    ] = None,
    defaults: Annotated[
        bool,
        typer.Option("--defaults/--no-defaults", help="Include the default thresholds."),
    ] = True,
    junit: Annotated[
        str | None, typer.Option("--junit", metavar="FILE", help="Write JUnit XML to FILE.")
    ] = None,
    diagnose: Annotated[
        bool, typer.Option("--diagnose", help="Each check of diagnose is a test case too.")
    ] = False,
    *,
    common: Common,
) -> None:
    started = time.monotonic()
    gate = api.check(
        selector, maximum=max_ or [], minimum=min_ or [], thresholds_file=thresholds,
        defaults=defaults, diagnose=diagnose, workers=common.workers, store=common.store,
        engine=common.engine, ray_address=common.ray_address,
    )  # fmt: skip
    if not gate.cases and gate.diagnosis is None:
        raise UsageError(
            "no threshold to check (--no-defaults and none given)",
            "give --max METRIC=VALUE, --min METRIC=VALUE, --thresholds FILE or --diagnose.",
        )
    common.emit(gate, api.sections(gate), f"mismatchctl check: {gate.label}", "Thresholds.")
    if junit is not None:
        from mismatchctl.render.junit import junit_xml

        _write(junit, junit_xml(gate, time.monotonic() - started))
    if not gate.passed:
        raise typer.Exit(EXIT_CHECK_FAILED)


def _write(path: str, text: str) -> None:
    from mismatchctl.render.output import write_text

    write_text(path, text, "--junit")
    say(f"Wrote {path}")
