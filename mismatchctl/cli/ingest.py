"""`mismatchctl ingest`: read dump files into a run of the store."""

from __future__ import annotations

from typing import Annotated

import typer

from mismatchctl import api
from mismatchctl.api import DEFAULT_WORKERS, FORMATS
from mismatchctl.cli import reading as R
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
    fmt: R.FormatOpt = None,
    map_: R.MapOpt = None,
    skip_bad: R.SkipBadFlag = False,
    trust_pickle: R.TrustPickleFlag = False,
    allow_padding: R.AllowPaddingFlag = False,
    attr: R.AttrOpt = None,
    routes_aligned: R.RoutesAlignedOpt = "input",
    routes_topk: R.RoutesTopkOpt = 0,
    num_experts: R.NumExpertsOpt = None,
    keep_routes: R.KeepRoutesFlag = False,
    keep_masked: R.KeepMaskedFlag = True,
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
    from mismatchctl.cli.progress import IngestProgress  # rich.progress: 25 ms

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
