"""`compare A B` against the report of both runs (issue #46, decision 2), in one run:

    python bench/compare_ab.py --size 20 --repeats 5 [--before-tree DIR --before-label REV]
        [--workdir DIR] [--write docs/benchmarks.md]

Generates the dumps of bench/gen_dumps.py (``--size`` millions of response positions, 20 steps;
reused when the workdir holds them) and ingests them twice into one store, as ``bench`` and as
``bench2`` with the two sides swapped (bench/run.py's store), then times, alternating
round-robin for ``--repeats`` rounds after an untimed warm-up round, each command in a fresh
process measured with wait4 (wall, CPU, peak RSS):

    report      report bench --by-gpu --json /dev/null -q                (one run)
    report A B  report bench bench2 --by-gpu --json /dev/null -q         (both runs, one report)
    compare     compare bench bench2 --json /dev/null -q
    compare@before, report A B@before   the same with the code of --before-tree (a checkout of
                an earlier revision, e.g. ``git archive REV | tar -x -C DIR``), on the same store

The target is compare / report A B <= 1.15 (medians of the same run). Writes the section
"## compare against the report of both runs" of --write and the raw numbers to the workdir's
compare_ab.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from run import RUN, RUN2, SWAPPED, BenchError, ensure_dumps, log, measure, run_quiet
from sections import replace_section
from views import mctl, rounds

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SECTION = "## compare against the report of both runs"
TARGET = 1.15


def build_store(dumps: Path, store: Path, timeout: float) -> None:
    """``bench`` and ``bench2`` (the sides swapped) ingested into ``store``, unless it has them."""
    if store.exists():
        runs = json.loads(run_quiet(mctl(ROOT, "runs", "--json", "--store", str(store)), timeout))
        if {RUN, RUN2} <= {r["run"] for r in runs}:
            log(f"reusing the store {store}")
            return
    for run, extra in ((RUN, []), (RUN2, SWAPPED)):
        cmd = mctl(ROOT, "ingest", str(dumps), "--run", run, "-q", "--store", str(store), *extra)
        measure(cmd, f"ingest-{run}", store.parent / "logs", timeout)


def commands(store: Path, before: Path | None) -> dict[str, list[str]]:
    s = ["--json", os.devnull, "-q", "--store", str(store)]
    out = {
        "report": mctl(ROOT, "report", RUN, "--by-gpu", *s),
        "report A B": mctl(ROOT, "report", RUN, RUN2, "--by-gpu", *s),
        "compare": mctl(ROOT, "compare", RUN, RUN2, *s),
    }
    if before is not None:
        out["compare@before"] = mctl(before, "compare", RUN, RUN2, *s)
        out["report A B@before"] = mctl(before, "report", RUN, RUN2, "--by-gpu", *s)
    return out


def med(runs: list[dict[str, Any]], key: str = "wall") -> float:
    return statistics.median(m[key] for m in runs)


def section(result: dict[str, Any]) -> str:
    got, label = result["runs"], result.get("before_label") or "before"
    base = med(got["report A B"])
    rows = [
        "| command | median wall s (min-max) | CPU s | x report A B | peak RSS MB |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, ms in got.items():
        walls = sorted(m["wall"] for m in ms)
        rows.append(
            f"| `{name.replace('@before', f' at {label}')}` | {med(ms):.2f} "
            f"({walls[0]:.2f}-{walls[-1]:.2f}) | {med(ms, 'cpu'):.2f} | {med(ms) / base:.2f} | "
            f"{max(m['rss_mb'] for m in ms):.0f} |"
        )
    ratio = med(got["compare"]) / base
    per_round = [
        c["wall"] / r["wall"] for c, r in zip(got["compare"], got["report A B"], strict=True)
    ]
    lines = [
        f"`python bench/compare_ab.py --size {result['size']:g} --repeats {result['repeats']}"
        + (f" --before-label {label}" if "compare@before" in got else "")
        + f"`: {result['positions']:,} response positions (bench/gen_dumps.py, 20 steps) "
        "ingested twice into one store, `bench` and `bench2` with the sides swapped; every "
        f"command in a fresh process, {result['repeats']} alternating rounds after a warm-up "
        f"round, medians; {os.cpu_count()} cores shared with other jobs (load average "
        f"{result['load_start']} at the start, {result['load_end']} at the end).",
        "",
        *rows,
        "",
        f"compare / report A B = **{ratio:.2f}** (target {TARGET}: "
        f"{'met' if ratio <= TARGET else 'not met'}); per round "
        + ", ".join(f"{x:.2f}" for x in per_round)
        + ".",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=float, default=20, help="millions of response positions")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--before-tree", type=Path, help="a checkout of an earlier revision")
    parser.add_argument("--before-label", help="its name in the table (a commit)")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--write", type=Path, help="replace this Markdown file's section")
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: bytecode cached
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mismatchctl-compare-"))
    workdir.mkdir(parents=True, exist_ok=True)
    dumps = workdir / f"dumps_{args.size:g}M"
    marker, _ = ensure_dumps(dumps, int(args.size * 1e6), args.timeout)
    store = workdir / f"store_{args.size:g}M"
    build_store(dumps, store, args.timeout)
    before = args.before_tree.resolve() if args.before_tree else None
    result: dict[str, Any] = {
        "size": args.size, "repeats": args.repeats, "positions": marker["written"],
        "before_label": args.before_label,
        "load_start": " / ".join(f"{x:.1f}" for x in os.getloadavg()),
    }  # fmt: skip
    result["runs"] = rounds(commands(store, before), args.repeats, workdir / "logs", args.timeout)
    result["load_end"] = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    (workdir / "compare_ab.json").write_text(json.dumps(result, indent=1) + "\n")
    text = section(result)
    print(text)
    if args.write:
        replace_section(args.write, SECTION, text)


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        raise SystemExit(str(e)) from None
