"""The views against one report, and the report against an earlier revision, in one run:

    python bench/views.py --size 20 --repeats 3 --before REV --write docs/benchmarks.md [--workdir DIR]
        [--only report@before,explain,explain@before]

Generates the dumps of bench/gen_dumps.py (``--size`` millions of response positions, 20 steps;
reused when the workdir holds them), ingests them as run ``bench`` with this checkout and, with
``--before REV``, with the code of ``REV`` (a git worktree, its own store: the store format may
differ), then times, alternating round-robin for ``--repeats`` rounds (one untimed warm-up round
first: numba's cache), each command in a fresh process measured with wait4 (wall, peak RSS):

    report            report bench --json /dev/null -q                       (this checkout)
    report@REV        the same command with the code of REV, on its store
    explain@REV       explain (below) with the code of REV, on its store
    show@REV          show (below) with the code of REV, on its store
    report --by       report bench --by kv_position --by turn_position --by length --by order
    explain           explain 'bench@steps=10..' --baseline 'bench@steps=..9'  (one read)
    explain --no-bootstrap  the same without the findings' bootstrap intervals
    diagnose          diagnose bench --json /dev/null -q                     (one cube per run)
    tokens            tokens bench --top 100 (and --sequences)               (one read, top-k)
    certify           certify bench                                          (one read)
    show              show bench 10-100                                      (one sequence)

Writes the section "## Views against one report" of --write (the rest of the file kept) and the
raw numbers to the workdir's views.json. The shell's PYTHONDONTWRITEBYTECODE is dropped for the
commands (an installed package has its bytecode cached).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from run import BenchError, ensure_dumps, log, measure, run_quiet
from sections import replace_section

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SECTION = "## Views against one report"
RUN = "bench"
SHOWN = "10-100"  # a sample id of bench/gen_dumps.py (step 10, its 101st response)


def mctl(tree: Path, *args: str) -> list[str]:
    """The CLI of the checkout ``tree`` (its package first on the path)."""
    code = (
        f"import runpy, sys; sys.path.insert(0, {str(tree)!r}); sys.argv[0] = 'mismatchctl'; "
        "runpy.run_module('mismatchctl', run_name='__main__', alter_sys=True)"
    )
    return [sys.executable, "-c", code, *args]


def commands(store: Path, before: tuple[Path, Path] | None) -> dict[str, list[str]]:
    s = ["--store", str(store), "--json", os.devnull, "-q"]
    out = {
        "report": mctl(ROOT, "report", RUN, *s),
        "report --by (4 new keys)": mctl(
            ROOT,
            "report",
            RUN,
            "--by",
            "kv_position",
            "--by",
            "turn_position",
            "--by",
            "length",
            "--by",
            "order",
            *s,
        ),
        "explain": mctl(ROOT, "explain", f"{RUN}@steps=10..", "--baseline", f"{RUN}@steps=..9", *s),
        "explain --no-bootstrap": mctl(
            ROOT,
            "explain",
            f"{RUN}@steps=10..",
            "--baseline",
            f"{RUN}@steps=..9",
            "--no-bootstrap",
            *s,
        ),
        "diagnose": exit_0_or_3(mctl(ROOT, "diagnose", RUN, *s)),
        "tokens --top 100": mctl(ROOT, "tokens", RUN, "--top", "100", *s),
        "tokens --sequences --top 100": mctl(
            ROOT, "tokens", RUN, "--sequences", "--top", "100", *s
        ),
        "certify": exit_0_or_3(mctl(ROOT, "certify", RUN, *s)),
        "show": mctl(ROOT, "show", RUN, SHOWN, "--store", str(store), "--json", os.devnull),
    }
    if before is not None:
        tree, old_store = before
        old = ["--store", str(old_store), "--json", os.devnull, "-q"]
        out["report@before"] = mctl(tree, "report", RUN, *old)
        out["explain@before"] = mctl(
            tree, "explain", f"{RUN}@steps=10..", "--baseline", f"{RUN}@steps=..9", *old
        )
        out["show@before"] = mctl(tree, "show", RUN, SHOWN, *old[:-1])
    return out


def exit_0_or_3(cmd: list[str]) -> list[str]:
    """``diagnose`` exits 3 when a check fails: a result, not an error of the bench."""
    return ["sh", "-c", f'{shlex.join(cmd)}; s=$?; [ "$s" -eq 0 ] || [ "$s" -eq 3 ]']


def worktree(rev: str, workdir: Path) -> Path:
    path = workdir / f"tree-{rev}"
    if not path.exists():
        run_quiet(["git", "worktree", "add", "--detach", str(path), rev], 600)
    return path


def ingest(tree: Path, dumps: Path, store: Path, timeout: float) -> dict[str, Any]:
    if store.exists():
        shutil.rmtree(store)
    cmd = mctl(tree, "ingest", str(dumps), "--run", RUN, "--store", str(store), "-q")
    got = measure(cmd, f"ingest-{store.name}", store.parent / "logs", timeout)
    runs = json.loads(run_quiet(mctl(tree, "runs", "--json", "--store", str(store)), timeout))
    got["model_tokens"] = sum(int(r["model_tokens"]) for r in runs if r["run"] == RUN)
    if not got["model_tokens"]:
        raise BenchError(f"{tree}: ingest left no model tokens in {store}")
    return got


def rounds(
    cmds: dict[str, list[str]],
    repeats: int,
    logs: Path,
    timeout: float,
    warm: tuple[str, ...] | None = None,
) -> dict:
    """``repeats`` alternating rounds of ``cmds`` after an untimed warm-up of ``warm`` (default:
    every command; numba's cache, the page cache)."""
    names = list(cmds)
    for name in names if warm is None else warm:
        measure(cmds[name], f"warm-{slug(name)}", logs, timeout)
    got: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            m = measure(cmds[name], f"{slug(name)}-{r}", logs, timeout)
            log(f"round {r + 1}: {name}: {m['wall']:.2f} s, {m['rss_mb']:.0f} MB")
            got[name].append(m)
    return got


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def section(result: dict[str, Any]) -> str:
    got = result["runs"]
    base = statistics.median(m["wall"] for m in got["report"])
    rows = [
        "| command | median s (min-max) | x report | peak RSS MB |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, ms in got.items():
        walls = sorted(m["wall"] for m in ms)
        med = statistics.median(walls)
        label = name.replace("@before", f" at {result['before']}")
        rows.append(
            f"| `{label}` | {med:.2f} ({walls[0]:.2f}-{walls[-1]:.2f}) | {med / base:.2f} | "
            f"{max(m['rss_mb'] for m in ms):.0f} |"
        )
    head = (
        f"`python bench/views.py --size {result['size']:g} --repeats {result['repeats']}"
        f"{' --before ' + result['before'] if result['before'] else ''}`: "
        f"{result['positions']:,} response positions (bench/gen_dumps.py, 20 steps), ingested "
        f"by each revision into its own store; every command in a fresh process, "
        f"{result['repeats']} alternating rounds after a warm-up round, medians; "
        f"{os.cpu_count()} cores, shared with other jobs (the load average when it ran: "
        f"{result['load']}). `explain` reads the selection once (the cube, and the sequences' "
        "cells for the findings' bootstrap); `diagnose` reads once (the report's pass computes "
        "one cube per run beside the report's cells)."
    )
    ing = result.get("ingest", {})
    notes = [
        f"- ingest ({k}): {v['wall']:.1f} s, {v['rss_mb']:.0f} MB, "
        f"{v['model_tokens'] / v['wall'] / 1e6:.1f}M model tokens/s"
        for k, v in ing.items()
    ]
    return head + "\n\n" + "\n".join(rows) + ("\n\n" + "\n".join(notes) if notes else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=float, default=20, help="millions of response positions")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", help="a git revision whose report is timed beside this one")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--write", type=Path, help="replace this Markdown file's section")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument(
        "--only", help="comma-separated command names to time (default: all; 'report' is kept)"
    )
    args = parser.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: bytecode cached
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mismatchctl-views-"))
    workdir.mkdir(parents=True, exist_ok=True)
    dumps = workdir / f"dumps_{args.size:g}M"
    marker, _ = ensure_dumps(dumps, int(args.size * 1e6), args.timeout)
    store = workdir / "store-now"
    result: dict[str, Any] = {
        "size": args.size, "repeats": args.repeats, "before": args.before,
        "positions": marker["written"], "ingest": {},
    }  # fmt: skip
    result["ingest"]["this checkout"] = ingest(ROOT, dumps, store, args.timeout)
    before = None
    if args.before:
        tree = worktree(args.before, workdir)
        old_store = workdir / "store-before"
        result["ingest"][args.before] = ingest(tree, dumps, old_store, args.timeout)
        before = (tree, old_store)
    result["load"] = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    cmds = commands(store, before)
    if args.only:
        keep = {"report", *(n.strip() for n in args.only.split(","))}
        cmds = {n: c for n, c in cmds.items() if n in keep}
    result["runs"] = rounds(cmds, args.repeats, workdir / "logs", args.timeout)
    (workdir / "views.json").write_text(json.dumps(result, indent=1) + "\n")
    text = section(result)
    print(text)
    if args.write:
        replace_section(args.write, SECTION, text)
    if before is not None:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(before[0])], cwd=ROOT, check=False
        )


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        raise SystemExit(str(e)) from None
