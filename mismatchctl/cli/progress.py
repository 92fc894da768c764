"""Progress on stderr for long work: bars on a terminal (silent when stderr is not one), and a
long command's phases (one bar on a terminal, one line per phase on a pipe)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column
from rich.text import Text

from mismatchctl.cli.consoles import err_console
from mismatchctl.display import visible


class _Bar:
    """One transient rich progress bar with a single task."""

    def __init__(
        self, enabled: bool, columns: list[ProgressColumn], description: str = "", **fields: object
    ) -> None:
        console = err_console()
        self._bar = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            *columns,
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not enabled or not console.is_terminal,
        )
        self._task = self._bar.add_task(description, **fields)  # type: ignore[arg-type]

    def __enter__(self) -> _Bar:
        self._bar.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._bar.__exit__(kind, exc, tb)


class IngestProgress(_Bar):
    """Files done out of all files, and model tokens read so far."""

    def __init__(self, enabled: bool = True) -> None:
        column = TextColumn(
            "{task.completed}/{task.fields[files]} files  {task.fields[tokens]:,} tokens"
        )
        super().__init__(enabled, [column], total=None, files=0, tokens=0)
        self._tokens = 0

    def __enter__(self) -> IngestProgress:
        super().__enter__()
        return self

    def file(self, path: Path, index: int, total: int) -> None:
        self._bar.update(
            self._task,
            total=total,
            completed=index,
            files=total,
            description=visible(path.name)[-40:],
        )

    def tokens(self, count: int) -> None:
        self._tokens += count
        self._bar.update(self._task, tokens=self._tokens)


class TokenProgress(_Bar):
    """Model tokens processed, out of the selection's tokens when known."""

    def __init__(self, total: int | None, enabled: bool = True) -> None:
        text = (
            "{task.completed:,} / {task.total:,} tokens" if total else "{task.completed:,} tokens"
        )
        super().__init__(enabled, [TextColumn(text)], total=total or None, description="reading")

    def __enter__(self) -> TokenProgress:
        super().__enter__()
        return self

    def advance(self, tokens: int) -> None:
        self._bar.advance(self._task, tokens)


class _Count(ProgressColumn):
    """``done/total unit`` (``done unit`` without a total; nothing for a phase without one)."""

    def __init__(self) -> None:
        super().__init__(table_column=Column(no_wrap=True))

    def render(self, task: Task) -> Text:
        unit = task.fields.get("unit", "")
        if not unit:
            return Text("")
        done = f"{int(task.completed):,}"
        return Text(f"{done}/{int(task.total):,} {unit}" if task.total else f"{done} {unit}")


class _Eta(ProgressColumn):
    """``ETA 0:01:23`` for a counted phase once rich has a rate to go by; nothing otherwise."""

    def __init__(self) -> None:
        super().__init__(table_column=Column(no_wrap=True))

    def render(self, task: Task) -> Text:
        left = task.time_remaining
        if not task.total or left is None:
            return Text("")
        minutes, seconds = divmod(int(left), 60)
        return Text(
            f"ETA {minutes // 60}:{minutes % 60:02d}:{seconds:02d}", style="progress.remaining"
        )


class Phases:
    """The phases of a long command on stderr, one at a time. On a terminal: one live bar, its
    description the phase's (the run at hand after it), with its count and time; on a
    pipe or a file: one line as each phase starts (``lines``; a command with a single phase
    passes False and stays silent there, as a bar would). ``note`` prints a line that stays in
    both. Nothing goes to stdout while the bar is live: the command writes its output after
    ``stop``."""

    def __init__(self, enabled: bool = True, lines: bool = True) -> None:
        self._console = err_console()
        self.live = enabled and self._console.is_terminal
        self._lines = enabled and lines and not self.live
        self._bar = Progress(
            # run and file names are data: never read as markup
            TextColumn("{task.description}", style="progress.description", markup=False),
            BarColumn(),
            _Count(),
            TimeElapsedColumn(),
            _Eta(),
            console=self._console,
            transient=True,
            redirect_stdout=False,  # stdout is the command's output, never the bar's console
            redirect_stderr=False,
            disable=not self.live,
        )
        self._task = self._bar.add_task("", total=None, unit="")
        self._text = ""

    def __enter__(self) -> Phases:
        return self  # the bar shows from the first phase on

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """The bar gone (it is transient); later phases print nothing."""
        self._bar.stop()
        self.live = self._lines = False

    def note(self, message: str) -> None:
        """A line that stays, above the bar on a terminal."""
        self._console.print(message, highlight=False, markup=False, soft_wrap=True)

    def start(self, text: str, total: int | None = None, unit: str = "") -> None:
        """A new phase: ``text`` says what it does; ``total`` of ``unit`` when it counts."""
        self._text = text
        if self._lines:
            self.note(text)
        if self.live:
            self._bar.start()
        self._bar.reset(self._task, total=total, completed=0, unit=unit, description=text)

    def advance(self, count: int = 1) -> None:
        self._bar.advance(self._task, count)

    def step(self, name: str, index: int, total: int) -> None:
        """The phase's item ``index`` of ``total`` (a run) starts: named after the phase."""
        description = f"{self._text}: {visible(name)}"
        self._bar.update(self._task, total=total, completed=index, description=description)

    def steps(self, text: str, unit: str = "runs") -> Callable[[str, int, int], None]:
        """A callback ``(name, index, total)`` (the api's ``on_run``, ``on_diagnosis``): its
        first call starts the phase ``text`` with ``{total}`` filled in (``diagnosing {total}
        runs``), counted in ``unit``; each call names the item."""

        def step(name: str, index: int, total: int) -> None:
            if index == 0:
                self.start(text.format(total=total), total, unit)
            self.step(name, index, total)

        return step
