"""`mismatchctl show RUN SAMPLE_ID`: one sequence, token by token, coloured by |r|."""

from __future__ import annotations

from typing import Annotated

import typer

from mismatchctl import api
from mismatchctl.cli.common import Common, HtmlOut, JsonOut, StoreOpt, TokenizerOpt, handle_errors

HELP = """One sequence of a run, token by token: each token on a background by |r| = |trainer - rollout logprob| (with a legend), the prompt and every tool response as a marked gap with its length (the turn that follows named; a tool response's own tokens as text under it when ingest kept their ids), and the sequence's K3 sum, vllm_kl, sum r and max |r|. --html FILE writes the same as coloured text with a tooltip per token (position, turn, id, p_rollout, p_trainer, r, K3).

The sequence is found by its sample id (as `tokens --sequences` lists it). When several share it (verl's uid names a prompt group), --step narrows them and --index picks one; without --index the error lists them. --tokenizer as in `tokens` (remembered for the run). See docs/tokens.md.

[bold]Examples[/]

  mismatchctl show v1-a100 step6-p02-r3

  mismatchctl show v1-a100 3f2c9a --step 120 --index 2 --html seq.html

  mismatchctl show v1-a100 3f2c9a --tokenizer ~/models/Qwen3-8B --json -
"""


@handle_errors
def show(
    run: Annotated[str, typer.Argument(help="The run.")],
    sample_id: Annotated[str, typer.Argument(help="The sequence's sample id.")],
    step: Annotated[
        int | None, typer.Option("--step", help="Only the sequences of this step.")
    ] = None,
    index: Annotated[
        int | None,
        typer.Option("--index", help="Which of the sequences sharing the sample id (from 0)."),
    ] = None,
    tokenizer: TokenizerOpt = None,
    json_out: JsonOut = None,
    html_out: HtmlOut = None,
    store: StoreOpt = None,
) -> None:
    result = api.show(run, sample_id, step=step, index=index, tokenizer=tokenizer, store=store)
    common = Common(json_out=json_out, html_out=html_out, store=store)
    title = f"mismatchctl show: {run} {sample_id}"
    common.emit(result, api.sections(result), title, "One sequence, token by token")
