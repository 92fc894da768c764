"""How the command-line process starts and ends (the ``mismatchctl`` script and
``python -m mismatchctl``; the app itself, as tests and callers use it, is untouched).

Start-up loads typer, numpy, pyarrow and numba: hundreds of thousands of objects that live as
long as the process. Python's cyclic garbage collector would scan them again and again while
they are made (about a tenth of a small report's time); it is held off for the first
``GC_HOLD_SECONDS``, then the objects made so far are frozen out of its scans (``gc.freeze``)
and it runs as usual, so that long commands (``watch``, a billion-token report) collect their
cycles. BLAS calls run on the calling thread (``one_blas_thread``). At the end, once the exit
handlers have run (Ray's shutdown, temporary mirrors) and the output is flushed, the process
exits without the interpreter's teardown (freeing every module and the compiled kernels' LLVM
state: 0.2 s or more of every command). Every file a command writes is closed by then (``with``
blocks) and the store commits before a command returns, so nothing is lost.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import sys
import threading
from typing import NoReturn

GC_HOLD_SECONDS = 3.0  # a start-up, even on a slow machine; then collections resume
# Read by OpenBLAS (numpy's wheels) and MKL when numpy loads: one thread for a BLAS call. The
# engine's workers already fill the cores; a dot product long enough for OpenBLAS to split
# (a part's lag pairs in diagnose) waited milliseconds a call for its own threads to get a core:
# 70% of diagnose's wall time on a 20M-token run of 1,000 parts, on two busy cores.
ONE_BLAS_THREAD = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread() -> None:
    """BLAS on the calling thread, unless the environment says otherwise; before numpy loads."""
    for name in ONE_BLAS_THREAD:
        os.environ.setdefault(name, "1")


def hold_gc(seconds: float = GC_HOLD_SECONDS) -> None:
    """No cyclic collection for ``seconds``; then freeze what exists and collect as usual."""
    gc.disable()
    timer = threading.Timer(seconds, release_gc)
    timer.daemon = True
    timer.start()


def release_gc() -> None:
    gc.freeze()
    gc.enable()


def exit_code(code: object) -> int:
    """The status ``sys.exit(code)`` would give (a message is printed to stderr first)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def exit_now(code: object) -> NoReturn:
    """Exit with ``code`` after the exit handlers and a flush, without the teardown."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        # a closed pipe (`| head`) or a closed stream: nothing more can be written there
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(exit_code(code))


def main() -> NoReturn:
    """The console entry point: the app, then :func:`exit_now` with its status."""
    hold_gc()
    one_blas_thread()
    from mismatchctl.cli.main import app

    try:
        app()
    except SystemExit as exc:
        exit_now(exc.code)
    exit_now(0)
