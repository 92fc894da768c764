"""`mismatchctl tokens SELECTION`: the worst tokens (or sequences) of a selection, or of a cell."""

from __future__ import annotations

from typing import Annotated

import typer

from mismatchctl import api
from mismatchctl.cli.common import BinsOpt, Common, SelectorArg, TokenizerOpt, analysis_command

HELP = """The worst tokens of a selection: the largest K3 contributions (rho - 1 - r, what vllm_kl averages), or with --sort abs-r the largest |r|, with --sort prob-diff the largest |p_trainer - p_rollout|; each with its run, step, sample id, turn, position, KV position, token id, p_rollout, p_trainer, r, its share of the cell's K3, and ±--context model tokens around it.

--sequences lists the worst sequences instead: by summed K3 (--sort k3), chi2 of the summed r (--sort chi2) or |sum r| (--sort abs-sum-r).

--where KEY=VALUE restricts to one cell of any split key (repeat it: every condition holds), written as the report's tables write the value or briefly: bin=0.001-0.01, turn_kind=later, turn=3+, kv_position=1024, gpu=A100, step=42, attr:data_source=gsm8k.

--tokenizer PATH decodes the ids (a tokenizer.json or a Hugging Face tokenizer directory on disk, read with the `tokenizers` library; `bytes` for a run whose ids are bytes); it is remembered for the selection's runs, so later commands decode without it. Ids outside the vocabulary show as <oov:ID>.

Exact, not sampled: the k best of every part merged, ties in the order run, step, seq, position. See docs/tokens.md.

[bold]Examples[/]

  mismatchctl tokens v1-a100

  mismatchctl tokens v1-a100 --where bin=0.001-0.01 --where turn_kind=later

  mismatchctl tokens 'v1-a100@steps=200..' --sort abs-r --context 10

  mismatchctl tokens v1-a100 --tokenizer ~/models/Qwen3-8B

  mismatchctl tokens v1-a100 --sequences --sort chi2 --json - | jq .tokens
"""


@analysis_command(HELP)
def tokens(
    selection: SelectorArg,
    top: Annotated[int, typer.Option("--top", "-n", help="How many to list.")] = 20,
    sort: Annotated[
        str,
        typer.Option(
            "--sort",
            help="Tokens: k3, abs-r or prob-diff. Sequences: k3, chi2 or abs-sum-r.",
        ),
    ] = "k3",
    sequences: Annotated[
        bool, typer.Option("--sequences", help="List the worst sequences, not tokens.")
    ] = False,
    where: Annotated[
        list[str] | None,
        typer.Option("--where", "-w", help="KEY=VALUE: a cell of any split key (repeatable)."),
    ] = None,
    context: Annotated[
        int, typer.Option("--context", help="Model tokens shown each side of a token.")
    ] = 5,
    tokenizer: TokenizerOpt = None,
    bins: BinsOpt = "log",
    *,
    common: Common,
) -> None:
    with common.progress() as progress:
        result = api.tokens(
            selection, top=top, sort=sort, sequences=sequences, where=where or [],
            context=context, tokenizer=tokenizer, bins=bins, **common.read(progress.advance),
        )  # fmt: skip
    what = "sequences" if sequences else "tokens"
    common.emit(
        result, api.sections(result), f"mismatchctl tokens: {selection}", f"The worst {what}"
    )
