"""`mismatchctl ingest`: read dump files into a run of the store."""

from __future__ import annotations

from typing import Annotated

import typer

from mismatchctl import api
from mismatchctl.api import DEFAULT_WORKERS, FORMATS
from mismatchctl.cli.common import (
    EngineOpt,
    JsonFlag,
    QuietFlag,
    RayAddressOpt,
    StoreOpt,
    emit_json,
    handle_errors,
    say,
    show,
)
from mismatchctl.cli.progress import IngestProgress

HELP = f"""Read dump files (files, directories or globs) into a run of the store.

Inputs may also be on object storage: s3:// or gs:// URIs of objects, prefixes or globs, with credentials from the environment (AWS_PROFILE, AWS_ENDPOINT_URL...); each object is copied to a temporary file while it is read. --engine ray reads the files in parallel Ray tasks (the store must be on a filesystem every node sees).

Formats are detected from columns and keys: {", ".join(FORMATS)}. All files are ingested or none is: on any error the store is left as it was. Ingesting the same content again is a no-op.

Only model tokens are stored (mask = 1); the token ids of the tool responses (masked positions between model tokens), when the dump has them, are kept beside them for `show` (--no-keep-masked: not). Without a response mask, verl's attention_mask is used by its response part (it excludes padding, not tool responses: a file whose kept positions show tool-response fills is refused); without any mask every listed position counts, and a file whose sequences end in padding (8 or more positions at exact 0.0 on both sides) is refused unless --allow-padding. An ingest that adds no model token is reported with a warning.

Each sequence's prompt length is kept when the dump has it (a prompt_length column, the prompt part of attention_mask, prompt token ids, slime's tokens, NeMo-RL's full-sequence arrays): report --by kv_position counts the KV cache from it. Per-sequence columns of few values (data_source, env, task, dp_rank...) are kept as attributes (report --by attr:<name>; listed by runs show); --attr COLUMN keeps another.

Torch .pt files are loaded with weights_only=True: a file that needs full unpickling is refused. --trust-pickle loads it anyway, and that RUNS ANY CODE THE FILE CONTAINS with your permissions: use it only for files from a source you trust.

verl DataProto pickles (DataProto.save_to_disk: .pkl, .dp, or .pt) are refused too unless you pass --trust-pickle; they are then read by a restricted unpickler that rebuilds only numpy arrays and torch tensors (verl and tensordict need not be installed). TRL completions tables and prime-rl inference Parquet hold one logprob side or none: they are refused with what is missing.

[bold]Examples[/]

  mismatchctl ingest dumps/ --run v1-a100 --tag gpu=A100 --tag engine=vllm-0.18.1

  mismatchctl ingest 'slime_debug/train_*.pt' --run slime-h20 --tag gpu=H20

  mismatchctl ingest 'verl_dumps/step_*.pkl' --run verl-h20 --trust-pickle

  mismatchctl ingest outputs/token_exports/ --run prime-a100 --tag gpu=A100

  mismatchctl ingest batch.parquet --run x --map rollout=gen_lp --map trainer=fsdp_lp --map mask=keep

  mismatchctl ingest /shared/dumps/ --run v2 --engine ray --ray-address auto --store /shared/store

  mismatchctl ingest 's3://bucket/rl/dumps/step_*.parquet' --run v3 --tag gpu=H20
"""


@handle_errors
def ingest(
    inputs: Annotated[
        list[str],
        typer.Argument(help="Dump files, directories or globs; or s3:// / gs:// URIs of them."),
    ],
    run: Annotated[str, typer.Option("--run", "-r", help="Name of the run to add the data to.")],
    tag: Annotated[
        list[str] | None,
        typer.Option("--tag", "-t", help="KEY=VALUE tag for the run (repeatable), e.g. gpu=H20."),
    ] = None,
    fmt: Annotated[
        str | None, typer.Option("--format", "-f", help=f"Force a format: {', '.join(FORMATS)}.")
    ] = None,
    map_: Annotated[
        list[str] | None,
        typer.Option(
            "--map",
            "-m",
            help="ROLE=COLUMN for other column names (roles: rollout, trainer, mask, tokens, "
            "step, sample_id, gpu, turn, position, reward, entropy, weight_version).",
        ),
    ] = None,
    skip_bad: Annotated[
        bool,
        typer.Option(
            "--skip-bad", help="Drop bad samples (counted and listed) instead of failing."
        ),
    ] = False,
    trust_pickle: Annotated[
        bool,
        typer.Option(
            "--trust-pickle",
            help="Load .pt files with full unpickling, and read verl DataProto pickles (with a "
            "restricted unpickler). RISK: a pickle can run any code with your permissions; "
            "only for files from a source you trust.",
        ),
    ] = False,
    allow_padding: Annotated[
        bool,
        typer.Option(
            "--allow-padding",
            help="For dumps without a mask: keep trailing runs that look like padding (8 or "
            "more positions at exact 0.0 on both sides) as model tokens, counted and reported, "
            "instead of refusing the file.",
        ),
    ] = False,
    attr: Annotated[
        list[str] | None,
        typer.Option(
            "--attr",
            help="Keep this per-sequence column as an attribute (repeatable), whatever its "
            "number of values (floats too): a split key attr:<name>. Text and integer columns "
            "of at most 64 values (data_source, env, dp_rank...) are kept without it.",
        ),
    ] = None,
    routes_aligned: Annotated[
        str,
        typer.Option(
            "--routes-aligned",
            help="MoE routes (rollout_routed_experts / trainer_routed_experts / routed_experts): "
            "input = row t holds the experts chosen while token t was the input (verl, vLLM, "
            "SGLang), so token t's logprob is paired with row t-1; output = with row t.",
        ),
    ] = "input",
    routes_topk: Annotated[
        int,
        typer.Option(
            "--routes-topk",
            help="The top-k of routes whose encoding does not carry it (SGLang's base64).",
        ),
    ] = 0,
    num_experts: Annotated[
        int | None,
        typer.Option("--num-experts", help="Check every routed expert id is in [0, N)."),
    ] = None,
    keep_routes: Annotated[
        bool,
        typer.Option(
            "--keep-routes",
            help="Store both sides' full routes per token (by default only their per-layer "
            "agreement and overlap).",
        ),
    ] = False,
    keep_masked: Annotated[
        bool,
        typer.Option(
            "--keep-masked/--no-keep-masked",
            help="Keep the token ids of the masked positions inside each sequence (its tool "
            "responses), when the dump has token ids, so that `show` writes them as text.",
        ),
    ] = True,
    engine: EngineOpt = "local",
    ray_address: RayAddressOpt = None,
    workers: Annotated[
        int,
        typer.Option(
            "--workers", help="With --engine ray and no cluster: the CPUs of the local Ray."
        ),
    ] = DEFAULT_WORKERS,
    store: StoreOpt = None,
    json: JsonFlag = False,
    quiet: QuietFlag = False,
) -> None:
    with IngestProgress(enabled=not quiet) as progress:
        result = api.ingest(
            inputs,
            run,
            tags=tag or [],
            fmt=fmt,
            mapping=map_ or [],
            skip_bad=skip_bad,
            trust_pickle=trust_pickle,
            allow_padding=allow_padding,
            attrs=attr or [],
            routes=api.RouteOptions(routes_aligned, num_experts, keep_routes, routes_topk),
            keep_masked=keep_masked,
            store=store,
            progress=progress,
            engine=engine,
            ray_address=ray_address,
            workers=workers,
        )
    if json:
        emit_json(api.views.ingest_dict(result), "-")
        for warning in result.warnings:  # the summary says them; with --json, stderr does
            say(f"Warning: {warning}", "yellow")
    else:
        show(api.views.ingest_sections(result), stderr=True)


ingest.__doc__ = HELP
