"""What every command shares: consoles, the error boundary, the options, and how a result is
written (terminal, JSON, HTML). Commands call the api and hand its result to ``Common.emit``."""

from __future__ import annotations

import functools
import inspect
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, get_type_hints

import typer

from mismatchctl.api import DEFAULT_WORKERS
from mismatchctl.cli.consoles import err_console, out_console
from mismatchctl.display import printable
from mismatchctl.errors import MismatchError
from mismatchctl.render.json import dumps

if TYPE_CHECKING:
    from mismatchctl.cli.progress import Phases

F = TypeVar("F", bound=Callable[..., Any])

EXIT_ERROR = 1
_NUMPY_FP = "(overflow|invalid value|divide by zero|underflow) encountered"


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
        from mismatchctl.render.output import write_text

        write_text(target, text + "\n", "--json")


def say(message: str, style: str = "") -> None:
    """A message on stderr, never wrapped (paths are copied from here) nor read as markup."""
    err_console().print(message, style=style, highlight=False, markup=False, soft_wrap=True)


def show(sections: Sequence[Any], stderr: bool = False) -> None:
    """Sections in the terminal (stdout, or stderr for messages such as an ingest summary)."""
    from mismatchctl.render import terminal

    (err_console() if stderr else out_console()).print(terminal.render(sections))


# --- options ----------------------------------------------------------------------------------

# the panels of `--help` (typer's rich_help_panel): a command's own options stay under "Options"
OUTPUT_PANEL = "Output"
STORE_PANEL = "Store and engine"
METRIC_PANEL = "Metric settings"

StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="MISMATCHCTL_STORE",
        show_envvar=False,  # the help says it
        help="Store directory, or an s3:// or gs:// URI (default: $MISMATCHCTL_STORE, else "
        "~/.local/share/mismatchctl/store).",
        show_default=False,
        rich_help_panel=STORE_PANEL,
    ),
]
JsonFlag = Annotated[
    bool,
    typer.Option(
        "--json", help="Print JSON to stdout instead of tables.", rich_help_panel=OUTPUT_PANEL
    ),
]
JsonOut = Annotated[
    str | None,
    typer.Option(
        "--json",
        metavar="FILE",
        help="Write JSON to FILE, or to stdout with -.",
        rich_help_panel=OUTPUT_PANEL,
    ),
]
HtmlOut = Annotated[
    str | None,
    typer.Option(
        "--html",
        metavar="FILE",
        help="Write a self-contained HTML page to FILE.",
        rich_help_panel=OUTPUT_PANEL,
    ),
]
WorkersOpt = Annotated[
    int,
    typer.Option(
        "--workers",
        help="Parallel workers: threads, or the CPUs of a local Ray (--engine ray).",
        rich_help_panel=STORE_PANEL,
    ),
]
EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help="Where parts are read: local (threads) or ray (Ray tasks; needs the ray extra).",
        rich_help_panel=STORE_PANEL,
    ),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        help="Ray cluster for --engine ray: auto or ray://HOST:10001 (default: $RAY_ADDRESS, "
        "else a local Ray). The store must be on a filesystem every node sees, or in a bucket "
        "(README: Running on Ray).",
        show_default=False,
        rich_help_panel=STORE_PANEL,
    ),
]
QuietFlag = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress bar.", rich_help_panel=OUTPUT_PANEL)
]
SelectorArg = Annotated[
    str, typer.Argument(help="A run, KEY=VALUE[,...] filters, optional @steps=A..B.")
]
BinsOpt = Annotated[
    str,
    typer.Option(
        "--bins",
        help="Probability bins: log, linear:N, or edges like 0,1e-3,0.5,1.",
        rich_help_panel=METRIC_PANEL,
    ),
]
ClampOpt = Annotated[
    float,
    typer.Option(
        "--clamp",
        help="vllm_kl_clamped: K3 of r clamped to [-C, C] (slime/miles: 10).",
        rich_help_panel=METRIC_PANEL,
    ),
]
TauOpt = Annotated[
    float,
    typer.Option(
        "--tau",
        help="extreme_frac_tau<T>: share of tokens with |r| > ln(T) (AReaL: 2).",
        rich_help_panel=METRIC_PANEL,
    ),
]
IsBoundsOpt = Annotated[
    str | None,
    typer.Option(
        "--is-bounds",
        help="is_oob_ratio: share of tokens with exp(r) outside LOWER_UPPER, or 1/UPPER..UPPER "
        "for one number (verl's threshold grammar; default 0.5_2.0).",
        rich_help_panel=METRIC_PANEL,
    ),
]
TokenizerOpt = Annotated[
    str | None,
    typer.Option(
        "--tokenizer",
        help="A tokenizer.json, a Hugging Face tokenizer directory, or `bytes` (ids are bytes): "
        "token text instead of ids; remembered for the runs.",
    ),
]


@dataclass
class Common:
    """The options every analysis command shares (declared once, in ``analysis_command``)."""

    json_out: JsonOut = None
    html_out: HtmlOut = None
    workers: WorkersOpt = DEFAULT_WORKERS
    engine: EngineOpt = "local"
    ray_address: RayAddressOpt = None
    store: StoreOpt = None
    quiet: QuietFlag = False

    def read(self, on_part: Callable[[int], None] | None = None) -> dict[str, Any]:
        """The api keywords of where and how to read."""
        return {
            "workers": self.workers,
            "store": self.store,
            "on_part": on_part,
            "engine": self.engine,
            "ray_address": self.ray_address,
        }

    def progress(self, total: int | None = None) -> Any:
        from mismatchctl.cli.progress import TokenProgress

        return TokenProgress(total, enabled=not self.quiet)

    def phases(self, lines: bool = True) -> Phases:
        """The command's phases on stderr (``cli/progress.Phases``): a line per phase on a pipe
        only with ``lines`` (a command of several long phases)."""
        from mismatchctl.cli.progress import Phases

        return Phases(enabled=not self.quiet, lines=lines)

    def emit(
        self,
        result: Any,
        sections: Sequence[Any],
        title: str,
        subtitle: str,
        phases: Phases | None = None,
    ) -> None:
        """JSON to a file or stdout (then nothing else goes to stdout), the terminal view
        otherwise, and the HTML page: with ``phases``, written first as a phase of its own,
        then the phases stopped before anything is printed."""
        if phases is not None:
            if self.html_out is not None:
                phases.start("writing the HTML report")
                _write_html(self.html_out, title, subtitle, sections)
            phases.stop()
        if self.json_out is not None:
            emit_json(result.to_dict(), self.json_out)
        if self.json_out != "-":
            show(sections)
        if self.html_out is not None:
            if phases is None:
                _write_html(self.html_out, title, subtitle, sections)
            say(f"Wrote {self.html_out}")
        if self.json_out not in (None, "-"):
            say(f"Wrote {self.json_out}")


def _write_html(path: str, title: str, subtitle: str, sections: Sequence[Any]) -> None:
    from mismatchctl.render import html

    html.write(path, title, subtitle, sections)


def analysis_command(help_text: str) -> Callable[[F], F]:
    """A command that reads the store: the options of ``Common`` are added to its signature
    (a parameter of the command with the same name replaces the shared one) and handed to it
    as ``common``; errors go through the error boundary."""

    def decorate(func: F) -> F:
        own = inspect.signature(func, eval_str=True).parameters
        shared = {f.name: f for f in fields(Common)}
        hints = get_type_hints(Common, include_extras=True)
        params = [p for name, p in own.items() if name != "common"]
        params += [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                              annotation=hints[name])
            for name, f in shared.items()
            if name not in own
        ]  # fmt: skip

        @functools.wraps(func)
        def wrapper(**kwargs: Any) -> Any:
            common = Common(**{k: kwargs[k] for k in shared})
            mine = {k: v for k, v in kwargs.items() if k in own}
            return func(**mine, common=common)

        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        del wrapper.__wrapped__  # type: ignore[attr-defined]
        wrapper.__doc__ = help_text
        return handle_errors(wrapper)  # type: ignore[return-value]

    return decorate
