"""A write the store's file system refuses, said as such: a full disk, a read-only file system,
or a directory this user may not write to.

Writers stage their files and commit them in one catalog transaction, so a refused write leaves
the store as it was; what the user needs is where and why, not a traceback nor a message that
blames the input ("cannot read ... No space left on device"). SQLite and Arrow say it in their
own words (``database or disk is full``, ``attempt to write a readonly database``, an Arrow
``IOError`` without an errno): they are read too.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from mismatchctl.errors import StoreError

FULL, READ_ONLY, DENIED = "full", "read-only", "denied"
_ERRNO = {
    errno.ENOSPC: FULL,
    errno.EDQUOT: FULL,
    errno.EROFS: READ_ONLY,
    errno.EACCES: DENIED,
    errno.EPERM: DENIED,
}
_WORDS = (  # what SQLite and Arrow write in place of an errno
    ("no space left on device", FULL),
    ("disk quota exceeded", FULL),
    ("database or disk is full", FULL),
    ("read-only file system", READ_ONLY),
    ("readonly database", READ_ONLY),
    ("permission denied", DENIED),
)


class StoreNotWritable(StoreError):
    """A write to the store refused by its file system: ``kind`` is full, read-only or denied."""

    def __init__(self, message: str, hint: str | None = None, kind: str = FULL) -> None:
        super().__init__(message, hint)
        self.kind = kind

    def __reduce__(self) -> tuple:
        return (self.__class__, (self.message, self.hint, self.kind))


def refusal(exc: BaseException) -> str | None:
    """The kind of a refused write (full, read-only, denied) an error says, or None."""
    if isinstance(exc, OSError) and exc.errno in _ERRNO:
        return _ERRNO[exc.errno]
    if isinstance(exc, OSError | sqlite3.Error) or type(exc).__module__.startswith("pyarrow"):
        text = str(exc).lower()
        return next((kind for words, kind in _WORDS if words in text), None)
    return None


def not_writable(root: Path, exc: BaseException, doing: str) -> StoreNotWritable | None:
    """The error to raise for ``exc`` met while ``doing`` (e.g. "staging the parts of an
    ingest") in the store at ``root``; None when ``exc`` is no refused write. A permission
    error counts only for a path inside the store (reading an input can be denied too)."""
    kind = refusal(exc)
    where = getattr(exc, "filename", None)
    if kind is None or (kind == DENIED and where is not None and not _inside(root, where)):
        return None
    at = f" ({where})" if where else ""
    if kind == FULL:
        return StoreNotWritable(
            f"no space left on the disk of the store {root} while {doing}{at}; the store is "
            "as it was",
            f"free space on that disk (`df -h {root}` shows it), or point --store at a store "
            "on another disk.",
            FULL,
        )
    if kind == READ_ONLY:
        return StoreNotWritable(
            f"the store {root} is on a read-only file system: cannot write while {doing}{at}; "
            "the store is as it was",
            "commands that only read (report, compare, runs...) work on it; to write, point "
            f"--store at a writable copy (`cp -r {root} NEW`).",
            READ_ONLY,
        )
    return StoreNotWritable(
        f"the store {root} is not writable by this user: permission denied while {doing}{at}; "
        "the store is as it was",
        "ask the store's owner for write access, or point --store at a store of your own.",
        DENIED,
    )


def _inside(root: Path, where: object) -> bool:
    try:
        Path(os.fsdecode(where)).resolve().relative_to(root.resolve())  # type: ignore[arg-type]
    except (ValueError, TypeError, OSError):
        return False
    return True


class StoreWrites:
    """Turns a write the file system refuses, inside the block, into a StoreNotWritable (one
    object serves several blocks)."""

    def __init__(self, root: Path, doing: str) -> None:
        self.root, self.doing = root, doing

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: object) -> bool:
        if isinstance(exc, OSError | sqlite3.Error) or type(exc).__module__.startswith("pyarrow"):
            error = not_writable(self.root, exc, self.doing)
            if error is not None:
                raise error from None
        return False
