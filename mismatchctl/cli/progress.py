"""Progress bars on stderr for long work (silent when stderr is not a terminal)."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn

from mismatchctl.cli.common import err_console
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
