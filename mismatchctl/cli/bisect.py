"""`mismatchctl bisect RUN --model PATH`: which component makes the mismatch, by re-scoring a
sample of the run's sequences with its checkpoint under settings that each change one thing."""

from __future__ import annotations

from typing import Annotated

import typer

from mismatchctl import api
from mismatchctl.cli.common import Common, HtmlOut, JsonOut, QuietFlag, StoreOpt, handle_errors

HELP = """Which component makes the mismatch: a sample of the run's sequences (prompt + response token ids from the store) re-scored with the run's checkpoint under a grid of settings, each one change from the trainer's (--start: float32 by default, or bf16; one full teacher-forced forward): bf16, fp16, the lm_head and final norm in float32 (on bf16), incremental decoding with a KV cache (and bf16+incremental; a chunked prefill of the prompt, --prefill-chunk), the KV cache stored in bf16 or fp8 e4m3 (a per-tensor or a per-head scale), the attention implementation (eager, sdpa; flash on CUDA when installed), left- or right-padded into a batch with others, and the sampler's temperature, top-p and top-k (from --temperature / --top-p / --top-k or the run's `temperature` / `top_p` / `top_k` tags).

The sample is stratified by the hot cells: explain's top findings on the run (or one cell given with --cell KEY=VALUE, repeated: every condition holds, the --where grammar of `tokens`), plus a control sample from the sequences in no hot cell. Each setting's logprobs are compared with both sides: K3 = mean(exp(d) - 1 - d) and mean d, d = re-scored - side, with sequence-bootstrap 95% intervals, overall (each sequence weighted by its stratum), per hot cell, in the control sample and per turn kind. The answer first: which setting reproduces the rollout side (it accounts for 90% of the mismatch or more), which single change moves the trainer side furthest toward it and how much of the mismatch it accounts for (overall and in each cell), or that nothing here reproduces it (the engine has a path outside the grid), and the same per hot cell.

First the trainer check: the start setting must give the trainer side (K3 at most max(1e-9, 1% of the sample's mismatch)); else the checkpoint is not the run's: exit code 3. The dump must hold prompt and response token ids (DumpWriter's `prompts`). --model is a local checkpoint directory (transformers, never downloaded) or `module:function` (or `file.py:function`) returning a torch module: the full-forward settings, and the incremental and KV-cache ones when it offers prefill and decode. A trainer that divides its logits by the run's temperature is found (the start checked at both), and every setting then runs at it. The work (sequences x settings) is said before it starts; the engine path decodes 16 sequences at a time; a small model runs on one torch thread on CPU unless OMP_NUM_THREADS is set. --html writes the page (the verdict, the tables, a figure of every setting's K3 per cell). Needs `pip install 'mismatchctl[torch,bisect]'`. See docs/bisect.md.

[bold]Examples[/]

  mismatchctl bisect v1-a100 --model ~/ckpt/step-120 --steps 120..120

  mismatchctl bisect v1-a100 --model ~/ckpt/step-120 --settings bf16,incremental,kv-fp8 --sample 50

  mismatchctl bisect v1-a100 --model ~/ckpt/step-120 --cell kv_position=1024 --html bisect.html

  mismatchctl bisect v1-a100 --model ~/ckpt/step-120 --start bf16 --top-k 50 --prefill-chunk 256

  mismatchctl bisect v1-a100 --model mypkg.models:tiny --temperature 0.7 --json -

  mismatchctl bisect ref-b --steps 8 --model sample_data/gen/bisect_model.py:load --store mismatchctl-demo/store
"""


@handle_errors
def bisect(
    run: Annotated[str, typer.Argument(help="The run.")],
    model: Annotated[
        str,
        typer.Option(
            "--model",
            "-m",
            help="A local checkpoint directory, or module:function (file.py:function).",
        ),
    ],
    sample: Annotated[
        int, typer.Option("--sample", help="Sequences to re-score (stratified by the hot cells).")
    ] = 200,
    steps: Annotated[
        str | None, typer.Option("--steps", help="Only these steps: A..B, A.., ..B, N.")
    ] = None,
    cell: Annotated[
        list[str] | None,
        typer.Option("--cell", help="KEY=VALUE: the hot cell, by hand (repeatable: all hold)."),
    ] = None,
    device: Annotated[str, typer.Option("--device", help="cpu or cuda.")] = "cpu",
    settings: Annotated[
        str | None,
        typer.Option("--settings", help="Comma-separated settings to run (default: all)."),
    ] = None,
    start: Annotated[
        str, typer.Option("--start", help="The trainer's precision: fp32 or bf16.")
    ] = "fp32",
    temperature: Annotated[
        float | None, typer.Option("--temperature", help="The engine's sampling temperature.")
    ] = None,
    top_p: Annotated[float | None, typer.Option("--top-p", help="The engine's top-p.")] = None,
    top_k: Annotated[int | None, typer.Option("--top-k", help="The engine's top-k.")] = None,
    prefill_chunk: Annotated[
        int, typer.Option("--prefill-chunk", help="Tokens per chunk of the chunked prefill.")
    ] = 512,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sample and bootstrap.")] = 0,
    json_out: JsonOut = None,
    html_out: HtmlOut = None,
    store: StoreOpt = None,
    quiet: QuietFlag = False,
) -> None:
    common = Common(json_out=json_out, html_out=html_out, store=store, quiet=quiet)
    names = [s.strip() for s in settings.split(",") if s.strip()] if settings else None
    with common.phases() as phases:
        phases.start("finding the hot cells, reading the sample, loading the model")

        def plan(text: str) -> None:
            phases.note(text)

        def step(name: str, done: int, total: int) -> None:
            if done <= 1:
                phases.start("re-scoring", total, "passes")
            phases.step(name, done, total)

        result = api.bisect(
            run, model, sample=sample, steps=steps, device=device, settings=names,
            temperature=temperature, top_p=top_p, top_k=top_k, start=start,
            prefill_chunk=prefill_chunk, cells=cell or (), seed=seed, store=store,
            on_plan=None if quiet else plan, on_pass=step,
        )  # fmt: skip
        common.emit(result, api.sections(result), f"mismatchctl bisect: {run}",
                    "Which component makes the mismatch", phases)  # fmt: skip
