"""`mismatchctl certify SELECTION`: are both sides bitwise (or near-bitwise) equal? Exit 3 if not."""

from __future__ import annotations

from typing import Annotated

import typer

from mismatchctl import api
from mismatchctl.cli.common import Common, SelectorArg, analysis_command
from mismatchctl.cli.diagnose import EXIT_CHECK_FAILED

HELP = """Certify that a selection's two sides are equal: for setups that promise bitwise parity (batch-invariant kernels, deterministic inference, zero-mismatch or FP16 recipes). The share of tokens whose two logprobs are exactly equal, the share within --tolerance (|r| <= X), the share of sequences equal throughout, where the diverging sequences first diverge (the distribution of the position, the earliest ones with their step, position, KV position and token, the first divergence in step order), and the largest |r|.

Exit code 0 when every token meets the criterion (bitwise equality by default), 3 when one does not (as `diagnose` when a check fails), so it can gate a CI job. See docs/tokens.md.

[bold]Examples[/]

  mismatchctl certify v2-batch-invariant

  mismatchctl certify 'v2@steps=100..' --tolerance 1e-6

  mismatchctl certify v2-bi --json - | jq .certify.first_divergence
"""


@analysis_command(HELP)
def certify(
    selection: SelectorArg,
    tolerance: Annotated[
        float,
        typer.Option("--tolerance", help="The largest |r| that counts as equal (0: bitwise)."),
    ] = 0.0,
    *,
    common: Common,
) -> None:
    with common.progress() as progress:
        result = api.certify(selection, tolerance=tolerance, **common.read(progress.advance))
    common.emit(result, api.sections(result), f"mismatchctl certify: {selection}", "Bitwise parity")
    if not result.holds:
        raise typer.Exit(EXIT_CHECK_FAILED)
