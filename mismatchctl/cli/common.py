"""What every command shares: consoles, the error boundary, and common options."""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderableType, RenderHook
from rich.segment import Segment

from mismatchctl.display import printable, visible
from mismatchctl.errors import MismatchError
from mismatchctl.render.jsonout import dumps

F = TypeVar("F", bound=Callable[..., Any])

EXIT_ERROR = 1
_NUMPY_FP = "(overflow|invalid value|divide by zero|underflow) encountered"


PIPE_WIDTH = 140  # tables written to a file or a pipe are not squeezed into 80 columns


class _Escaped:
    """A renderable whose text reaches the terminal with its control characters escaped (the
    cursor and style codes rich adds are control segments, and pass)."""

    def __init__(self, inner: RenderableType) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        for segment in console.render(self.inner, options):
            text = segment.text if segment.control else printable(segment.text)
            yield segment if text is segment.text else Segment(text, segment.style)


class _EscapeControls(RenderHook):
    """On every console of the CLI: what the renderers missed of `display.visible` (data
    strings: paths, names, tags, metric names from training logs) is still shown escaped."""

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_Escaped(r) for r in renderables]


def _guarded(console: Console) -> Console:
    console.push_render_hook(_EscapeControls())
    return console


def out_console() -> Console:
    """Data goes to stdout (so `--json - | jq` works)."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=PIPE_WIDTH)
    return _guarded(console)


def err_console() -> Console:
    """Messages and progress go to stderr."""
    return _guarded(Console(stderr=True))


def handle_errors(func: F) -> F:
    """The one place where library errors become a short message and an exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with warnings.catch_warnings():
                # float64 overflow of extreme logprob ratios is defined: the metric is null
                # (docs/reliability.md); numpy's warning about it is noise on the user's terminal
                warnings.filterwarnings("ignore", _NUMPY_FP, RuntimeWarning)
                return func(*args, **kwargs)
        except MismatchError as exc:
            console = err_console()
            # soft_wrap: paths and column names in a message must never be broken across lines
            console.print("[bold red]Error:[/] ", end="", soft_wrap=True)
            # messages quote file contents and user input: never send their control codes raw
            console.print(printable(exc.message), highlight=False, markup=False, soft_wrap=True)
            if exc.hint:
                console.print("\n[bold]Hint:[/] ", end="", soft_wrap=True)
                console.print(printable(exc.hint), highlight=False, markup=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None

    return wrapper  # type: ignore[return-value]


def emit_json(payload: Any, target: str) -> None:
    """Write JSON to a file, or to stdout for `-`."""
    text = dumps(payload)
    if target == "-":
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    else:
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")


def wrote(path: str) -> None:
    """Say on stderr where an output file went (never wrapped: paths are copied from here)."""
    err_console().print(f"Wrote {visible(path)}", highlight=False, markup=False, soft_wrap=True)


def emit_outputs(
    json_out: str | None,
    html_out: str | None,
    to_json: Callable[[], Any],
    to_terminal: Callable[[], Any],
    write_html: Callable[[str], None],
) -> None:
    """The output options every analysis command shares: JSON to a file or to stdout (then
    nothing else goes to stdout), the terminal view otherwise, and an HTML file."""
    if json_out is not None:
        emit_json(to_json(), json_out)
    if json_out != "-":
        out_console().print(to_terminal())
    if html_out is not None:
        write_html(html_out)
        wrote(html_out)
    if json_out not in (None, "-"):
        wrote(json_out)


StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="MISMATCHCTL_STORE",
        help="Store directory, or an s3:// or gs:// URI (default: $MISMATCHCTL_STORE, else "
        "~/.local/share/mismatchctl/store).",
        show_default=False,
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON to stdout instead of tables.")]
JsonOut = Annotated[
    str | None, typer.Option("--json", help="Write JSON to FILE, or to stdout with -.")
]
HtmlOut = Annotated[
    str | None, typer.Option("--html", help="Write a self-contained HTML page to FILE.")
]
WorkersOpt = Annotated[
    int,
    typer.Option(
        "--workers", help="Parallel workers: threads, or the CPUs of a local Ray (--engine ray)."
    ),
]
EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help="Where parts are read: local (threads in this process) or ray (Ray tasks, on a "
        "local Ray or the cluster of --ray-address; needs the ray extra).",
    ),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        help="Ray cluster for --engine ray: auto (started on this machine with `ray start "
        "--head`) or ray://HOST:10001 (default: $RAY_ADDRESS, else a local Ray with --workers "
        "CPUs). The store must be on a filesystem every node sees, or in a bucket.",
        show_default=False,
    ),
]
QuietFlag = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
