"""The options that say how dump files are read, declared once for `ingest` and `watch` (a
watch ingests each new file as `ingest` would): ``reading_options`` adds them to a command and
hands it one ``IngestOptions``. Each help is one line; the rules behind it are in README.md
("mismatchctl ingest"). A new reading option is a field of ``IngestOptions`` (options.py, which
the api re-exports) and its entry in ``READING`` here."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import fields
from typing import Annotated, Any, TypeVar

import typer

from mismatchctl.api import FORMATS, IngestOptions

F = TypeVar("F", bound=Callable[..., Any])

READING_PANEL = "Reading the dumps"
ROUTES_PANEL = "MoE routes"

RunOpt = Annotated[str, typer.Option("--run", "-r", help="Name of the run to add the data to.")]
TagOpt = Annotated[
    list[str] | None,
    typer.Option("--tag", "-t", help="KEY=VALUE tag for the run (repeatable), e.g. gpu=H20."),
]
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

# IngestOptions' fields as the command line declares them, in the order of the help's panels
READING: dict[str, Any] = {
    "tags": TagOpt,
    "fmt": FormatOpt,
    "mapping": MapOpt,
    "skip_bad": SkipBadFlag,
    "trust_pickle": TrustPickleFlag,
    "allow_padding": AllowPaddingFlag,
    "attrs": AttrOpt,
    "routes_aligned": RoutesAlignedOpt,
    "routes_topk": RoutesTopkOpt,
    "num_experts": NumExpertsOpt,
    "keep_routes": KeepRoutesFlag,
    "keep_masked": KeepMaskedFlag,
}
_DEFAULTS = {f.name: f.default for f in fields(IngestOptions)}


def reading_options(func: F) -> F:
    """A command that reads dump files: its parameter ``reading: IngestOptions`` stands, in its
    signature, for the options of ``READING`` (a repeatable option's default is None, the field's
    otherwise), and receives them as one ``IngestOptions``."""
    own = inspect.signature(func, eval_str=True).parameters
    keyword = inspect.Parameter.KEYWORD_ONLY  # typer passes every value by name
    params: list[inspect.Parameter] = []
    for name, param in own.items():
        if name != "reading":
            params.append(param.replace(kind=keyword))
            continue
        params += [
            inspect.Parameter(option, keyword, annotation=declared,
                              default=None if _DEFAULTS[option] == () else _DEFAULTS[option])
            for option, declared in READING.items()
        ]  # fmt: skip

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        given = {k: kwargs.pop(k) for k in READING}
        chosen = {k: tuple(v) if isinstance(v, list) else v for k, v in given.items()}
        reading = IngestOptions(**{k: v for k, v in chosen.items() if v is not None})
        return func(**kwargs, reading=reading)

    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    del wrapper.__wrapped__  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]
