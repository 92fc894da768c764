"""A progress bar on stderr for long work (silent when stderr is not a terminal)."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mismatchctl.cli.common import err_console


class IngestProgress:
    """Files done out of all files, and model tokens read so far."""

    def __init__(self, enabled: bool = True) -> None:
        console = err_console()
        self._bar = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("files  {task.fields[tokens]:,} model tokens"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not enabled or not console.is_terminal,
        )
        self._task = self._bar.add_task("ingest", total=None, tokens=0)
        self._tokens = 0

    def __enter__(self) -> IngestProgress:
        self._bar.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._bar.__exit__(kind, exc, tb)

    def file(self, path: Path, index: int, total: int) -> None:
        self._bar.update(self._task, total=total, completed=index, description=path.name[-40:])

    def tokens(self, count: int) -> None:
        self._tokens += count
        self._bar.update(self._task, tokens=self._tokens)


class TokenProgress:
    """Model tokens processed out of all tokens of the selection (for report and compare)."""

    def __init__(self, total: int | None, enabled: bool = True) -> None:
        console = err_console()
        self._bar = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed:,} / {task.total:,} tokens"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not enabled or not console.is_terminal,
        )
        self._task = self._bar.add_task("report", total=total)

    def __enter__(self) -> TokenProgress:
        self._bar.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._bar.__exit__(kind, exc, tb)

    def advance(self, tokens: int) -> None:
        self._bar.advance(self._task, tokens)
