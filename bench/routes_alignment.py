"""What the routes' alignment test costs an ingest (``ingest/routing_rows.ALIGNMENT_EVERY``,
``routing_kernels.shifted_agreement``), in one process and one run:

    python bench/routes_alignment.py [--tokens 1] [--layers 24] [--top-k 8] [--repeats 3] \
        [--write docs/benchmarks.md] [--workdir DIR]

The dumps of bench/routing.py (``--tokens`` millions of response positions; the Parquet ones:
no routes, fixed-size lists of int16, prime-rl's bytes), each ingested into a fresh store, in
alternating rounds after a warm-up round (numba's kernels compiled, the page cache warm), each round in another order.
Times are the process's CPU and wall seconds of each ingest, and the CPU seconds of the test
itself, timed where the ingest calls it: what the test adds to an ingest. (Timing the ingest
with the test left out instead measures the machine's noise as well: on 2 shared cores the
difference of two medians moved between -1% and +65% from one run to the next.) Prints the medians and, with ``--write``, replaces the section
"## MoE routes: the alignment test's cost" of that Markdown file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from routing import dumps  # noqa: E402
from sections import replace_section  # noqa: E402

from mismatchctl.ingest.routing_rows import ALIGNMENT_EVERY  # noqa: E402

SECTION = "## MoE routes: the alignment test's cost"
ROUTED = ("fixed", "bytes")


def ingest(path: Path, store: Path) -> tuple[float, float, float]:
    """CPU and wall seconds of one ingest of ``path`` into the fresh ``store``, and the CPU
    seconds spent in the test itself (``routing_rows._shifted``, timed where it is called)."""
    from mismatchctl import api
    from mismatchctl.ingest import routing_rows

    shipped = routing_rows._shifted
    spent = [0.0]

    def timed(*args):  # type: ignore[no-untyped-def]
        start = time.process_time()
        try:
            return shipped(*args)
        finally:
            spent[0] += time.process_time() - start

    routing_rows._shifted = timed  # type: ignore[assignment]
    try:
        shutil.rmtree(store, ignore_errors=True)
        cpu, wall = time.process_time(), time.perf_counter()
        api.ingest([path], "r", store=store)
        return time.process_time() - cpu, time.perf_counter() - wall, spent[0]
    finally:
        routing_rows._shifted = shipped  # type: ignore[assignment]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=float, default=1.0, help="millions of response positions")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--write", type=Path, help="a Markdown file to keep the section in")
    ap.add_argument("--workdir", type=Path, help="where the dumps go (default: a temporary one)")
    opts = ap.parse_args()
    work = opts.workdir or Path(tempfile.mkdtemp(prefix="routes-alignment-"))
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "fixed.parquet").exists():
        dumps(work, int(opts.tokens * 1e6), opts.layers, opts.top_k)
    model = int((work / "model-tokens").read_text())
    cases = ["plain", *ROUTED]
    found: dict[str, list[tuple[float, float, float]]] = {c: [] for c in cases}
    for rnd in range(opts.repeats + 1):  # the first round warms up; each round rotates
        for name in cases[rnd % len(cases) :] + cases[: rnd % len(cases)]:
            took = ingest(work / f"{name}.parquet", work / "store")
            if rnd:
                found[name].append(took)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        f"`python bench/routes_alignment.py --tokens {opts.tokens:g} --layers {opts.layers} "
        f"--top-k {opts.top_k} --repeats {opts.repeats}`: {model:,} model tokens, each dump "
        f"ingested in one process into a fresh store, {opts.repeats} alternating rounds after "
        f"a warm-up round (load average {load} at the end). The test compares one row in "
        f"{ALIGNMENT_EVERY} of each sequence set a position or a layer off (docs/metrics.md, "
        "Routing).",
        "",
        "| dump | ingest | CPU s: median | wall s: median | us of CPU a model token |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for name in cases:
        cpu = statistics.median(c for c, _, _ in found[name])
        wall = statistics.median(w for _, w, _ in found[name])
        what = "no routes" if name == "plain" else "with routes and the test"
        lines.append(f"| {name} | {what} | {cpu:.2f} | {wall:.2f} | {cpu / model * 1e6:.2f} |")
    lines.append("")
    for name in ROUTED:
        runs = found[name]
        spent = statistics.median(t for _, _, t in runs)
        share = statistics.median(t / c for c, _, t in runs)
        lines.append(
            f"- {name}: the test itself takes {spent:.3f} s of CPU, {share:.1%} of the ingest "
            f"with it ({spent / model * 1e9:.0f} ns a model token; medians)."
        )
    lines.append(
        "\nThe test's own time is measured where the ingest calls it (`routing_rows._shifted`: "
        "the compiled comparisons, the column's gather and its Arrow array), in the same ingests."
    )
    text = "\n".join(lines) + "\n"
    print(f"{SECTION}\n\n{text}")
    if opts.write:
        replace_section(opts.write, SECTION, text)
    if opts.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
