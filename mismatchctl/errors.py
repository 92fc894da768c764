"""Errors raised by the library. Only ``mismatchctl.cli`` turns them into messages and exit codes."""

from __future__ import annotations

from collections.abc import Sequence


class MismatchError(Exception):
    """Base class: a problem the user can fix. ``hint`` says how."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __reduce__(self) -> tuple:
        """Pickle with the hint (errors cross from worker processes to the CLI)."""
        return (self.__class__, (self.message, self.hint))

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n\nHint: {self.hint}"
        return self.message


class InputError(MismatchError):
    """A dump file is missing, unreadable, of an unknown format, or holds bad values."""


class StoreError(MismatchError):
    """The store is missing, locked, corrupt, or does not hold what was asked for."""


class UsageError(MismatchError):
    """An option or argument has a value the tool cannot use."""


class MissingDependencyError(MismatchError):
    """An optional extra (torch, ray) is needed for this operation and is not installed."""


class EngineError(MismatchError):
    """The compute engine cannot run the work: a Ray cluster that cannot be reached, a task that
    was lost (a worker died), or a store that the cluster's workers cannot see."""


class ModelMismatchError(MismatchError):
    """The model given to ``bisect`` does not give the run's trainer logprobs in the trainer's
    setting: it is not the checkpoint the run used. Exit code 3, as a check that failed."""

    exit_code = 3


def one_of(value: str, choices: Sequence[str], what: str, hint: str) -> str:
    """``value`` when it is one of ``choices``; else a UsageError ``{what}: expected one of ...``
    (``what`` names the value as the user gave it: ``--start fp16``)."""
    if value not in choices:
        raise UsageError(f"{what}: expected one of {', '.join(choices)}", hint)
    return value
