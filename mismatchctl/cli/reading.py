"""The options that say how dump files are read, declared once for `ingest` and `watch` (a
watch ingests each new file as `ingest` would). Each help is one line; the rules behind it are
in README.md ("mismatchctl ingest")."""

from __future__ import annotations

from typing import Annotated

import typer

from mismatchctl.api import FORMATS

READING_PANEL = "Reading the dumps"
ROUTES_PANEL = "MoE routes"

FormatOpt = Annotated[
    str | None,
    typer.Option(
        "--format",
        "-f",
        help=f"Force a format: {', '.join(FORMATS)}.",
        rich_help_panel=READING_PANEL,
    ),
]
MapOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--map",
        "-m",
        help="ROLE=COLUMN for another column name (roles: rollout, trainer, mask, tokens, "
        "step, sample_id, gpu, turn, position, reward, entropy, weight_version, batch_id, "
        "batch_size).",
        rich_help_panel=READING_PANEL,
    ),
]
SkipBadFlag = Annotated[
    bool,
    typer.Option(
        "--skip-bad",
        help="Drop bad samples (counted and listed) instead of failing.",
        rich_help_panel=READING_PANEL,
    ),
]
TrustPickleFlag = Annotated[
    bool,
    typer.Option(
        "--trust-pickle",
        help="Unpickle .pt files fully and read verl DataProto pickles. RISK: a pickle runs "
        "any code it holds (README: Untrusted .pt files).",
        rich_help_panel=READING_PANEL,
    ),
]
AllowPaddingFlag = Annotated[
    bool,
    typer.Option(
        "--allow-padding",
        help="No mask: keep trailing runs of 0.0 on both sides as model tokens (counted), "
        "instead of refusing the file.",
        rich_help_panel=READING_PANEL,
    ),
]
AttrOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--attr",
        help="Keep this per-sequence column as attr:<name> whatever its values (repeatable; "
        "columns of up to 64 values are kept without it).",
        rich_help_panel=READING_PANEL,
    ),
]
KeepMaskedFlag = Annotated[
    bool,
    typer.Option(
        "--keep-masked/--no-keep-masked",
        help="Keep the tool responses' token ids (masked positions between model tokens) "
        "for `show`.",
        rich_help_panel=READING_PANEL,
    ),
]
RoutesAlignedOpt = Annotated[
    str,
    typer.Option(
        "--routes-aligned",
        help="input: row t holds the experts chosen while token t was the input (verl, vLLM, "
        "SGLang); output: those that produced token t.",
        rich_help_panel=ROUTES_PANEL,
    ),
]
RoutesTopkOpt = Annotated[
    int,
    typer.Option(
        "--routes-topk",
        help="The top-k of routes whose encoding does not carry it (SGLang's base64).",
        rich_help_panel=ROUTES_PANEL,
    ),
]
NumExpertsOpt = Annotated[
    int | None,
    typer.Option(
        "--num-experts",
        help="Check every routed expert id is in [0, N).",
        rich_help_panel=ROUTES_PANEL,
    ),
]
KeepRoutesFlag = Annotated[
    bool,
    typer.Option(
        "--keep-routes",
        help="Store both sides' full routes (by default only their per-layer agreement).",
        rich_help_panel=ROUTES_PANEL,
    ),
]
