"""Run `mismatchctl ARGS...` and SIGKILL the process at the N-th call of a chosen function
(N = 0: never; tests/store/test_concurrency.py uses that for many-part ingests in a subprocess).

Used by tests/store/test_crash.py: ``python -m tests.crash_driver POINT N ARGS...``. Parts are made
tiny (PART_TOKENS) so that a small dump is written as many parts and every phase of an ingest
(staging, moving parts into place, the catalog transaction) has many points to die at.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from mismatchctl.cli.main import app
from mismatchctl.ingest import source as ingest_source
from mismatchctl.store import catalog, store
from mismatchctl.store import parts as store_parts

POINTS: dict[str, tuple[Any, str]] = {
    "stage": (store_parts.PartWriter, "write"),  # writing parts under .staging/
    "move": (os, "replace"),  # moving staged parts into place
    "catalog": (catalog, "insert_part"),  # inside the catalog transaction, before COMMIT
    "sweep": (store.Store, "sweep"),  # the removal of orphans (e.g. during `runs rm`)
}


def kill_at(owner: Any, name: str, n: int) -> None:
    original: Callable[..., Any] = getattr(owner, name)
    calls = 0

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)

    setattr(owner, name, wrapper)


def main() -> None:
    point, n, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    store_parts.PART_TOKENS = 500
    ingest_source.BATCH_TOKENS = 500
    kill_at(*POINTS[point], n)
    app(args, prog_name="mismatchctl")


if __name__ == "__main__":
    main()
