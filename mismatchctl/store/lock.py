"""One writer at a time: an exclusive ``flock`` on ``<store>/.lock`` around every write."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mismatchctl.errors import StoreError
from mismatchctl.store.writable import StoreWrites

LOCK_NAME = ".lock"


@contextmanager
def write_lock(root: Path, timeout: float = 120.0) -> Iterator[None]:
    """Hold the store's write lock; wait up to ``timeout`` seconds for another writer."""
    with StoreWrites(root, "taking its write lock"):
        fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StoreError(
                        f"the store {root} is locked by another writer (waited {timeout:.0f} s)",
                        "wait for the other ingest or rm to finish, then try again.",
                    ) from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
