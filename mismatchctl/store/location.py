"""Where the store lives: ``--store``, then ``$MISMATCHCTL_STORE``, then the user data directory."""

from __future__ import annotations

import os
from pathlib import Path

from mismatchctl.options import DEMO_STORE

ENV_VAR = "MISMATCHCTL_STORE"

CATALOG_NAME = "catalog.sqlite"  # the store's catalog file, in its root


def default_store_path() -> Path:
    """``$MISMATCHCTL_STORE``, else ``$XDG_DATA_HOME/mismatchctl/store``, else
    ``~/.local/share/mismatchctl/store``."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "mismatchctl" / "store"


def resolve_store_path(path: str | os.PathLike[str] | None) -> Path:
    return Path(path).expanduser() if path else default_store_path()


def point_at(store: str | os.PathLike[str]) -> str:
    """How to make every command use ``store``: the option, or the environment variable."""
    where = str(store)
    absolute = where if "://" in where else str(Path(where).expanduser().resolve())
    return f"add --store {where} to each command, or `export {ENV_VAR}={absolute}`"


def demo_store_hint(looked_in: str | os.PathLike[str]) -> str:
    """A sentence saying how to point at the demo's store, when ``mismatchctl demo`` left one
    in this directory and a command looked in another store; empty otherwise."""
    if not (DEMO_STORE / CATALOG_NAME).is_file():
        return ""
    if "://" not in str(looked_in) and Path(looked_in).resolve() == DEMO_STORE.resolve():
        return ""
    return f" The demo's runs are in {DEMO_STORE}: {point_at(DEMO_STORE)}."
