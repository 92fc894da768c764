"""Writing an output file (``--html``, ``--json``, ``--junit``): to a temporary name beside it,
then renamed into place. A write that fails (a full disk, a read-only directory) leaves no empty
or cut file under the name asked for, and the error says what could not be written where."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from mismatchctl.display import file_label
from mismatchctl.errors import UsageError

_WHY = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOENT: "its directory does not exist",
    errno.EISDIR: "it is a directory",
}


def write_text(path: str | Path, text: str, option: str) -> None:
    """``text`` into ``path`` (UTF-8), whole or not at all; ``option`` names the file in the
    error (``--html``)."""
    target = Path(path)
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # as open() would have made it (mkstemp: 0600)
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        why = _WHY.get(exc.errno or 0, exc.strerror or str(exc))
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        raise UsageError(
            f"{option} {file_label(path)}: cannot write it: {why}; nothing was written there",
            "free space on that disk, or name a file on another one."
            if full
            else "name a file in a directory that exists and that you can write to.",
        ) from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it: set it back at once
    os.umask(mask)
    return mask
