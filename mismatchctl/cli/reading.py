"""The options that say how dump files are read, declared once for `ingest` and `watch` (a
watch ingests each new file as `ingest` would)."""

from __future__ import annotations

from typing import Annotated

import typer

from mismatchctl.api import FORMATS

FormatOpt = Annotated[
    str | None, typer.Option("--format", "-f", help=f"Force a format: {', '.join(FORMATS)}.")
]
MapOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--map",
        "-m",
        help="ROLE=COLUMN for other column names (roles: rollout, trainer, mask, tokens, "
        "step, sample_id, gpu, turn, position, reward, entropy, weight_version).",
    ),
]
SkipBadFlag = Annotated[
    bool,
    typer.Option("--skip-bad", help="Drop bad samples (counted and listed) instead of failing."),
]
TrustPickleFlag = Annotated[
    bool,
    typer.Option(
        "--trust-pickle",
        help="Load .pt files with full unpickling, and read verl DataProto pickles (with a "
        "restricted unpickler). RISK: a pickle can run any code with your permissions; "
        "only for files from a source you trust.",
    ),
]
AllowPaddingFlag = Annotated[
    bool,
    typer.Option(
        "--allow-padding",
        help="For dumps without a mask: keep trailing runs that look like padding (8 or "
        "more positions at exact 0.0 on both sides) as model tokens, counted and reported, "
        "instead of refusing the file.",
    ),
]
AttrOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--attr",
        help="Keep this per-sequence column as an attribute (repeatable), whatever its "
        "number of values (floats too): a split key attr:<name>. Text and integer columns "
        "of at most 64 values (data_source, env, dp_rank...) are kept without it.",
    ),
]
RoutesAlignedOpt = Annotated[
    str,
    typer.Option(
        "--routes-aligned",
        help="MoE routes (rollout_routed_experts / trainer_routed_experts / routed_experts): "
        "input = row t holds the experts chosen while token t was the input (verl, vLLM, "
        "SGLang), so token t's logprob is paired with row t-1; output = with row t.",
    ),
]
RoutesTopkOpt = Annotated[
    int,
    typer.Option(
        "--routes-topk",
        help="The top-k of routes whose encoding does not carry it (SGLang's base64).",
    ),
]
NumExpertsOpt = Annotated[
    int | None,
    typer.Option("--num-experts", help="Check every routed expert id is in [0, N)."),
]
KeepRoutesFlag = Annotated[
    bool,
    typer.Option(
        "--keep-routes",
        help="Store both sides' full routes per token (by default only their per-layer "
        "agreement and overlap).",
    ),
]
KeepMaskedFlag = Annotated[
    bool,
    typer.Option(
        "--keep-masked/--no-keep-masked",
        help="Keep the token ids of the masked positions inside each sequence (its tool "
        "responses), when the dump has token ids, so that `show` writes them as text.",
    ),
]
