"""Which store a path names: a directory (``store.Store``) or an object-storage URI
(``remote.RemoteStore``, itself a ``Store``): the one module that knows both."""

from __future__ import annotations

import os

from mismatchctl.store.location import ENV_VAR, resolve_store_path
from mismatchctl.store.store import Store


def open_store(path: str | os.PathLike[str] | None = None) -> Store:
    """The store at ``path`` (default: ``$MISMATCHCTL_STORE`` or the user data directory): a
    directory, or an ``s3://`` / ``gs://`` URI (``store/remote.py``)."""
    from mismatchctl.store import remote  # here: pyarrow's filesystems only for a bucket

    uri = path if path else os.environ.get(ENV_VAR)
    if remote.is_store_uri(uri):
        return remote.RemoteStore(str(uri))
    return Store(resolve_store_path(path))
