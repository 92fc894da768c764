"""The README's test suite, timed: CPU seconds (every worker included), wall seconds, and the
longest stretch without output.

    .venv/bin/python bench/suite_time.py                 # the README's suite (pytest)
    .venv/bin/python bench/suite_time.py --slow          # what .ci/run runs (the slow tier too)
    .venv/bin/python bench/suite_time.py -- tests/stats  # any pytest arguments after --

The README states the suite's budget (under 5 minutes of CPU, no silence over 30 s): this script
is how those figures are measured. It runs pytest as a child process, echoes its output, and
reports the child's CPU time from ``resource.getrusage(RUSAGE_CHILDREN)`` (pytest-xdist workers
are pytest's children, so their time is counted), the wall time and the longest gap between two
bytes of output. ``--durations=25`` is added so the slowest tests are listed with the figures.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(args: list[str], slow: bool) -> dict[str, float]:
    env = dict(os.environ)
    if slow:
        env["MISMATCHCTL_SLOW_TESTS"] = "1"
    else:
        env.pop("MISMATCHCTL_SLOW_TESTS", None)
    # the README's figures are with warm caches, Python's bytecode among them: where
    # PYTHONDONTWRITEBYTECODE is set, every worker and every subprocess of a test compiles each
    # module again on every run (pytest's rewritten test modules too: about 10 s a worker)
    if env.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        print("PYTHONDONTWRITEBYTECODE unset for the suite: bytecode is cached", file=sys.stderr)
    cmd = [sys.executable, "-m", "pytest", "--durations=25", *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = last = time.monotonic()
    longest = 0.0
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert proc.stdout is not None
    while True:
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            break
        now = time.monotonic()
        longest = max(longest, now - last)
        last = now
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
    code = proc.wait()
    end = time.monotonic()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"exit": code, "cpu_s": cpu, "wall_s": end - start, "longest_silence_s": longest}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slow", action="store_true", help="the slow tier too (as .ci/run)")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    opts = parser.parse_args()
    found = run(opts.pytest_args, opts.slow)
    load = os.getloadavg()[0]
    print(
        f"\nsuite: CPU {found['cpu_s']:.0f} s ({found['cpu_s'] / 60:.1f} min), wall "
        f"{found['wall_s']:.0f} s, longest silence {found['longest_silence_s']:.0f} s, exit "
        f"{found['exit']}; {os.cpu_count()} CPUs ({platform.machine()}), load {load:.1f} at the end"
    )
    return int(found["exit"])


if __name__ == "__main__":
    raise SystemExit(main())
