"""`mismatchctl diagnose SELECTOR`: every check, layer by layer; exit code 3 when one fails."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from mismatchctl import api
from mismatchctl.cli.common import Common, SelectorArg, TokenizerOpt, analysis_command

EXIT_CHECK_FAILED = 3  # documented in README "Exit codes": lets CI gate on a diagnosis

HELP = """Run every check of the mismatch, layer by layer, each with a verdict (ok, warn, fail, or n/a when it cannot apply), its evidence and what to try next:

data integrity (alignment of the two sides, sentinel values, empty masks, trailing padding, duplicate sequences, a chat-template fault at the turn edges, the stop at the turns' last token, MoE routing replay and route capture, byte-fallback, special or whitespace tokens among the worst with --tokenizer, or the tokenizer remembered by `tokens --tokenizer`), semantic (systematic offset, temperature on one side, top-p renormalised on one side, a logit processor on one side: a repetition penalty, a logit bias), inference path (against the baseline, a code path localized to part of the run, low-probability tokens, tool responses, hardware, sequences hotter than the others of their step, MoE routing flips beyond bf16's), trajectory (spikes, regimes, trend, vllm_kl/trainer_ppl spiral, severe batches, stale weights, responses whose signs of r lean one way; with training curves from `mismatchctl ingest-metrics`: vllm_kl spikes together with grad-norm or entropy spikes, a vllm_kl rise before a reward drop), objective (is a correction warranted, and would it help).

The verdict comes first: the cause that explains the largest share of the excess, weighed over a catalogue of causes (data, semantics, template, stop, routing, routing_capture, hardware, code_path, tool_turns, sequences, growth, policy, precision), where it lies, the evidence that decided it, a second cause, the runner-up and why it lost, the next step; `unexplained` when no cause explains a fifth of the excess. docs/diagnose.md: the catalogue and its confusion matrix.

Parts of a run (steps, gpus, turns, positions) are judged against the rest of it at the same token probabilities, with intervals, however small the absolute level; with --baseline REF (a known-good run, a slice, or the same run's early steps) the whole selection is also judged against it, and an improvement is reported as one.

What it computes from each part of the store is kept in the part cache, so a second view of the same parts reads those states instead of the tokens (`ingest --warm` fills it ahead; README, Speed: where it lives, `$MISMATCHCTL_CACHE_MB=0` turns it off).

Exit code 0 when no check fails, 3 when one does (--fail-on warn: also when one warns), so it can gate the CI of a training stack. With -q (as in every command: no progress bar) only the verdict line and the checks that fail or warn are printed, one line each.

[bold]Examples[/]

  mismatchctl diagnose v1-a100

  mismatchctl diagnose 'v1-a100@steps=200..' --html diagnosis.html

  mismatchctl diagnose v2-a100 --baseline v1-h20

  mismatchctl diagnose v1-a100 --tokenizer ~/models/Qwen3-8B

  mismatchctl diagnose gpu=A100 --json - | jq '.diagnosis.checks[].verdict'

  mismatchctl diagnose v1-a100 -q --fail-on warn || echo "checks did not pass"

  mismatchctl diagnose v1-a100 --engine ray --ray-address auto
"""


class FailOn(StrEnum):
    fail = "fail"
    warn = "warn"


QUIET_HELP = "No progress bar, and only the verdict and the checks that fail or warn."


@analysis_command(HELP)
def diagnose(
    selector: SelectorArg,
    fail_on: Annotated[
        FailOn, typer.Option("--fail-on", help="Exit 3 on a failing check, or also on a warning.")
    ] = FailOn.fail,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP)] = False,
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline",
            metavar="REF",
            help="A known-good selector (run, slice, RUN@steps=A..B) to judge the selection "
            "against.",
        ),
    ] = None,
    tokenizer: TokenizerOpt = None,
    *,
    common: Common,
) -> None:
    with common.progress() as progress:
        result = api.diagnose(
            selector, baseline=baseline, tokenizer=tokenizer, **common.read(progress.advance)
        )
    title = f"mismatchctl diagnosis: {result.label}"
    subtitle = "Every check of the training-inference mismatch, layer by layer, with its evidence."
    common.emit(result, api.sections(result, brief=quiet), title, subtitle)
    gate = ("fail",) if fail_on is FailOn.fail else ("fail", "warn")
    if any(c.verdict in gate for c in result.checks):
        raise typer.Exit(EXIT_CHECK_FAILED)
