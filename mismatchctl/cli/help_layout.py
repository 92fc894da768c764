"""The options panels of `--help`: names and choices whole at any terminal width.

typer's panel is a table of five columns (long names, short names, negative names, type, help)
that rich shrinks together when the terminal is narrow: at 80 columns it cut `--routes-aligned`
and `parquet-sequence` with an ellipsis and left the help 17 characters wide. Here each option's
names sit in one column that is never wrapped nor cut (a `--x/--no-x` pair on two lines), its
type (with choices or a range) in a second, the help takes the rest, its default inline; and
when the rest is too narrow for a sentence, the help goes under the names, indented, across the
whole panel. typer's other parts (usage, text, commands) are kept: the commands and groups of
the app are built with ``HelpCommand`` / ``HelpGroup``, which put this panel in place of typer's
when their help is printed (never at start-up: the help is the only place that needs it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from typer.core import TyperArgument, TyperCommand, TyperGroup

if TYPE_CHECKING:  # rich's table and panel load when a help is printed, not at every start
    from rich.console import RenderableType
    from rich.table import Table
    from rich.text import Text

MIN_HELP = 28  # the narrowest help column that holds a sentence; narrower: help below the names
INDENT = 4  # of the help under the names
BORDER = 4  # a panel's border and padding, both sides


class HelpCommand(TyperCommand):
    def format_help(self, ctx: Any, formatter: Any) -> None:
        _install()
        return super().format_help(ctx, formatter)


class HelpGroup(TyperGroup):
    def format_help(self, ctx: Any, formatter: Any) -> None:
        _install()
        return super().format_help(ctx, formatter)


def _install() -> None:
    from typer import rich_utils

    rich_utils._print_options_panel = options_panel  # type: ignore[assignment]


def options_panel(
    *, name: str, params: list[Any], ctx: Any, markup_mode: Any, console: Any
) -> None:
    """typer's ``_print_options_panel``, with names and types that are never cut."""
    from rich.cells import cell_len
    from rich.panel import Panel

    if not params:
        return
    rows = [_row(p, ctx, markup_mode) for p in params]
    required = any(p.required for p in params)
    names = max(cell_len(line) for r in rows for line in r[1].plain.splitlines() or [""])
    types = max((cell_len(line) for r in rows for line in r[2].plain.splitlines()), default=0)
    fixed = (3 if required else 0) + names + (types + 2 if types else 0) + 2  # widths + gaps
    body = (
        _table(rows, required, names, types)
        if console.width - BORDER - fixed >= MIN_HELP
        else _stacked(rows, required)
    )
    console.print(Panel(body, border_style="dim", title=name, title_align="left"))


def _row(param: Any, ctx: Any, markup_mode: Any) -> tuple[Text, Text, Text, Text]:
    """(required mark, names, type, help) of one option or argument."""
    from rich.text import Text
    from typer import rich_utils

    mark = Text("*", style="red") if param.required else Text("")
    if isinstance(param, TyperArgument):
        names = Text(param.metavar or param.name or "", style="bold cyan")
        kind = param.type.get_metavar(param=param, ctx=ctx) or f"<{param.type.name}>"
    else:
        first = ", ".join([*_longs(param.opts), *_shorts(param.opts)])
        second = ", ".join([*_longs(param.secondary_opts), *_shorts(param.secondary_opts)])
        names = Text(first, style="bold cyan")
        if second:
            names.append("\n" + second, style="bold magenta")
        kind = "" if param.is_flag else param.make_metavar(ctx=ctx)
    describe = getattr(param.type, "_describe_range", None)  # an IntRange or a FloatRange
    span = describe() if describe is not None else ""
    if span:  # "<float range>" then "[x>=0.05]": the range says it is one
        kind = kind.replace(" range>", ">") + f"\n[{span}]"
    types = Text(kind, style="bold yellow")
    parts = rich_utils._get_parameter_help(param=param, ctx=ctx, markup_mode=markup_mode)
    help_text = Text(overflow="fold")
    for part in parts.renderables:  # the help, then [env var], [default], [required]
        if isinstance(part, Text) and part.plain:
            if help_text.plain:
                help_text.append(" ")
            help_text.append_text(part)
    return mark, names, types, help_text


def _longs(opts: list[str]) -> list[str]:
    return [o for o in opts if o.startswith("--")]


def _shorts(opts: list[str]) -> list[str]:
    return [o for o in opts if not o.startswith("--")]


def _table(rows: list[tuple[Text, ...]], required: bool, names: int, types: int) -> Table:
    from rich.table import Table

    table = Table(show_header=False, box=None, expand=True, padding=(0, 1), pad_edge=False)
    if required:
        table.add_column(no_wrap=True, width=1)
    table.add_column(no_wrap=True, min_width=names, width=names)
    if types:
        table.add_column(no_wrap=True, min_width=types, width=types)
    table.add_column(ratio=1, overflow="fold")
    for mark, name, kind, text in rows:
        cells = [mark] if required else []
        table.add_row(*cells, name, *([kind] if types else []), text)
    return table


def _stacked(rows: list[tuple[Text, ...]], required: bool) -> RenderableType:
    """Each option's names and type on a line, its help indented below: a terminal too narrow
    for the columns."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.text import Text

    out: list[RenderableType] = []
    for mark, name, kind, text in rows:
        head = Text.assemble(*([mark, " "] if required else []), name)
        if kind.plain:
            head.append("  ")
            head.append_text(kind.copy())
        head.no_wrap = True
        out += [head, Padding(text, (0, 0, 0, INDENT))]
    return Group(*out)
