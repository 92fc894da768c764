"""Start-up: what a command costs before it computes anything, against an earlier revision:

    python bench/startup.py --before REV --repeats 7 --write docs/benchmarks.md [--workdir DIR]

Ingests the sample run `ref` (sample_data/, 30,548 model tokens) with this checkout and with the
code of ``REV`` (a git worktree, each into its own store), finds a sequence to show, then times,
alternating round-robin for ``--repeats`` rounds after one untimed warm-up round (bytecode and
numba's caches: the times are those of an installed package run a second time), each command in
a fresh process measured with wait4 (wall, user + system CPU, peak RSS):

    floor            python -c 'import typer, typer.rich_utils'   (any typer CLI's rich help)
    --help           mismatchctl --help                            (this checkout, and at REV)
    report --help    mismatchctl report --help
    report (tiny)    mismatchctl report ref --json /dev/null -q     on the store of `ref`
    show (tiny)      mismatchctl show ref SAMPLE --step N --json /dev/null

Writes the section "## Start-up" of --write (the rest of the file kept) and the raw numbers to
the workdir's startup.json. The shell's PYTHONDONTWRITEBYTECODE is dropped for the commands (an
installed package has its bytecode cached).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from run import BenchError, log, measure, run_quiet
from sections import replace_section
from views import mctl, worktree

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SECTION = "## Start-up"
RUN = "ref"


def commands(trees: dict[str, tuple[Path, Path]], sample: tuple[str, int]) -> dict[str, list]:
    out: dict[str, list] = {"floor": [sys.executable, "-c", "import typer, typer.rich_utils"]}
    for label, (tree, store) in trees.items():
        at = "" if label == "now" else "@before"
        s = ["--store", str(store)]
        out[f"--help{at}"] = mctl(tree, "--help")
        out[f"report --help{at}"] = mctl(tree, "report", "--help")
        out[f"report (tiny){at}"] = mctl(tree, "report", RUN, *s, "--json", os.devnull, "-q")
        out[f"show (tiny){at}"] = mctl(
            tree, "show", RUN, sample[0], "--step", str(sample[1]), *s, "--json", os.devnull
        )
    return out


def ingest(tree: Path, store: Path, timeout: float) -> None:
    if not (store / "catalog.sqlite").exists():
        run_quiet(mctl(tree, "ingest", str(ROOT / "sample_data/runs" / RUN), "--run", RUN,
                       "--store", str(store), "-q"), timeout)  # fmt: skip


def a_sample(store: Path, timeout: float) -> tuple[str, int]:
    """The sample id and step of the run's worst sequence."""
    cmd = mctl(
        ROOT, "tokens", RUN, "--sequences", "--top", "1", "--store", str(store), "--json", "-"
    )
    top = json.loads(run_quiet(cmd, timeout))["tokens"]["sequences"][0]
    return top["sample_id"], int(top["step"])


def rounds(cmds: dict[str, list], repeats: int, logs: Path, timeout: float) -> dict[str, list]:
    names = list(cmds)
    for name in names:
        measure(cmds[name], f"warm-{_slug(name)}", logs, timeout)
    got: dict[str, list] = {n: [] for n in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            m = measure(cmds[name], f"{_slug(name)}-{r}", logs, timeout)
            got[name].append(m)
        log(f"round {r + 1} of {repeats}")
    return got


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def _med(ms: list[dict[str, Any]], key: str) -> str:
    vals = sorted(m[key] for m in ms)
    return f"{statistics.median(vals):.2f} ({vals[0]:.2f}-{vals[-1]:.2f})"


def section(result: dict[str, Any]) -> str:
    got, rev = result["runs"], result["before"]
    rows = [
        f"| command | this checkout: wall s | CPU s | at {rev}: wall s | CPU s | peak RSS MB (now / before) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]  # fmt: skip
    for name in got:
        if name.endswith("@before"):
            continue
        now, before = got[name], got.get(f"{name}@before")
        rss = f"{max(m['rss_mb'] for m in now):.0f}"
        then = ["", ""]
        if before:
            then = [_med(before, "wall"), _med(before, "cpu")]
            rss += f" / {max(m['rss_mb'] for m in before):.0f}"
        rows.append(f"| `{name}` | {_med(now, 'wall')} | {_med(now, 'cpu')} | "
                    f"{then[0]} | {then[1]} | {rss} |")  # fmt: skip
    head = (
        f"`python bench/startup.py --before {rev} --repeats {result['repeats']}`: each command in "
        f"a fresh process, {result['repeats']} alternating rounds after a warm-up round "
        "(bytecode and numba's caches warm), medians (min-max) of the wall and of the user + "
        f"system CPU; `tiny` is the sample run `{RUN}` (30,548 model tokens) in a store of its "
        f"own. {os.cpu_count()} cores, shared with other jobs (load average when it ran: "
        f"{result['load']}): the CPU seconds are the steadier number. `floor` is Python with "
        "typer and the rich help it renders, what any typer command line pays for `--help`."
    )
    return head + "\n\n" + "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="the revision to time beside this one")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--write", type=Path, help="replace this Markdown file's section")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: bytecode cached
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mismatchctl-startup-"))
    workdir.mkdir(parents=True, exist_ok=True)
    tree = worktree(args.before, workdir)
    trees = {
        "now": (ROOT, workdir / "store-tiny-now"),
        "before": (tree, workdir / "store-tiny-before"),
    }
    for t, store in trees.values():
        ingest(t, store, args.timeout)
    sample = a_sample(trees["now"][1], args.timeout)
    result: dict[str, Any] = {"before": args.before, "repeats": args.repeats, "sample": sample}
    result["load"] = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    result["runs"] = rounds(commands(trees, sample), args.repeats, workdir / "logs", args.timeout)
    (workdir / "startup.json").write_text(json.dumps(result, indent=1) + "\n")
    text = section(result)
    print(text)
    if args.write:
        replace_section(args.write, SECTION, text)


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        raise SystemExit(str(e)) from None
