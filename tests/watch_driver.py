"""Run `mismatchctl ARGS...` with the N-th file's ingest held in the middle until a signal stops
the process (tests/watch/test_watch.py: SIGINT and SIGTERM mid-ingest).

``python -m tests.watch_driver MARKER N ARGS...``: at the N-th call of ``ingest_source`` (the
source is read and its parts are being staged), MARKER is created and the call waits; the test
sends the signal once MARKER exists.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from mismatchctl.cli.main import app
from mismatchctl.ingest import run_ingest


def hold_at(marker: Path, n: int) -> None:
    original = run_ingest.ingest_source
    calls = 0

    def held(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        done = original(*args, **kwargs)  # parts staged, not committed
        if calls == n:
            marker.touch()
            time.sleep(600)  # the test's signal interrupts this
        return done

    run_ingest.ingest_source = held


def main() -> None:
    marker, n, args = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    hold_at(marker, n)
    app(args, prog_name="mismatchctl")


if __name__ == "__main__":
    main()
