"""Where the store lives: ``--store``, then ``$MISMATCHCTL_STORE``, then the user data directory."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "MISMATCHCTL_STORE"


def default_store_path() -> Path:
    """``$MISMATCHCTL_STORE``, else ``$XDG_DATA_HOME/mismatchctl/store``, else
    ``~/.local/share/mismatchctl/store``."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "mismatchctl" / "store"


def resolve_store_path(path: str | os.PathLike[str] | None) -> Path:
    return Path(path).expanduser() if path else default_store_path()
