"""`mismatchctl bisect RUN --model PATH`: which component makes the mismatch, by re-scoring a
sample of the run's sequences with its checkpoint under settings that each change one thing."""

from __future__ import annotations

from typing import Annotated

import typer

from mismatchctl import api
from mismatchctl.cli.common import Common, JsonOut, QuietFlag, StoreOpt, handle_errors

HELP = """Which component makes the mismatch: a sample of the run's sequences (prompt + response token ids from the store) re-scored with the run's checkpoint under a grid of settings, each one change from the trainer's (float32, one full teacher-forced forward): bf16, fp16, the lm_head and final norm in float32 (on bf16), incremental decoding with a KV cache (float32, and bf16+incremental), the KV cache stored in bf16 or fp8 e4m3, left-padded into a batch with others, and the sampler's temperature and top-p (from --temperature / --top-p or the run's `temperature` / `top_p` tags).

Each setting's logprobs are compared with both sides: K3 = mean(exp(d) - 1 - d) and mean d, d = re-scored - side, over the sampled model tokens, with sequence-bootstrap 95% intervals, overall and per turn kind. The answer first: which setting reproduces the rollout side (it accounts for 90% of the mismatch or more), which single change moves the trainer side furthest toward it and how much of the mismatch it accounts for, or that nothing here reproduces it (the engine has a path outside the grid).

First the trainer check: the start setting must give the trainer side (K3 at most max(1e-9, 1% of the sample's mismatch)); else the checkpoint is not the run's: exit code 3. The dump must hold prompt and response token ids (DumpWriter's `prompts`). --model is a local checkpoint directory (transformers, never downloaded) or `module:function` (or `file.py:function`) returning a torch module: the full-forward settings, and the incremental and KV-cache ones when it offers prefill and decode. A trainer that divides its logits by the run's temperature is found (the start checked at both), and every setting then runs at it. The work (sequences x settings) is said before it starts; a small model runs on one torch thread on CPU unless OMP_NUM_THREADS is set. Needs `pip install 'mismatchctl[torch,bisect]'`. See docs/bisect.md.

[bold]Examples[/]

  mismatchctl bisect v1-a100 --model ~/ckpt/step-120 --steps 120..120

  mismatchctl bisect v1-a100 --model ~/ckpt/step-120 --settings bf16,incremental,kv-fp8 --sample 50

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
        int, typer.Option("--sample", help="Sequences to re-score (a uniform sample).")
    ] = 200,
    steps: Annotated[
        str | None, typer.Option("--steps", help="Only these steps: A..B, A.., ..B, N.")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="cpu or cuda.")] = "cpu",
    settings: Annotated[
        str | None,
        typer.Option("--settings", help="Comma-separated settings to run (default: all)."),
    ] = None,
    temperature: Annotated[
        float | None, typer.Option("--temperature", help="The engine's sampling temperature.")
    ] = None,
    top_p: Annotated[float | None, typer.Option("--top-p", help="The engine's top-p.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sample and bootstrap.")] = 0,
    json_out: JsonOut = None,
    store: StoreOpt = None,
    quiet: QuietFlag = False,
) -> None:
    common = Common(json_out=json_out, store=store, quiet=quiet)
    names = [s.strip() for s in settings.split(",") if s.strip()] if settings else None
    with common.phases() as phases:
        phases.start("reading the sample and loading the model")

        def plan(text: str) -> None:
            phases.note(text)

        def step(name: str, done: int, total: int) -> None:
            if done <= 1:
                phases.start("re-scoring", total, "passes")
            phases.step(name, done, total)

        result = api.bisect(
            run, model, sample=sample, steps=steps, device=device, settings=names,
            temperature=temperature, top_p=top_p, seed=seed, store=store,
            on_plan=None if quiet else plan, on_pass=step,
        )  # fmt: skip
        common.emit(result, result.sections(), f"mismatchctl bisect: {run}",
                    "Which component makes the mismatch", phases)  # fmt: skip
