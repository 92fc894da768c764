"""explain and diagnose on long runs against one report, the same tokens over 10 and 1,000 steps:

    python bench/long_runs.py --size 100 --steps 10,1000 --growth 8 --repeats 1 \
        [--before REV] [--only explain,diagnose] --write docs/benchmarks.md [--workdir DIR]

For each step count: the dumps of bench/gen_dumps.py (``--size`` millions of response positions
over that many steps, the later turns' K3 rising ``--growth`` times over the run; reused when
the workdir holds them), ingested as run ``bench`` (into a store of its own), then, each command
in a fresh process measured with wait4 (wall, peak RSS), after an untimed warm-up (each
revision's report, explain and diagnose on a small store of the same generator: numba's cache;
the report and explain on the store: the page cache), ``--repeats`` alternating rounds:

    report                 report bench --json /dev/null -q
    explain                explain bench (the selection within itself; the findings' bootstrap)
    explain --no-bootstrap the same without the bootstrap
    explain late vs early  explain 'bench@steps=LATE' --baseline 'bench@steps=EARLY' (the last
                           tenth of the steps against the first: the rise, mix against rate)
    diagnose               diagnose bench --json /dev/null -q
    explain at REV, diagnose at REV   with ``--before REV``: the code of REV (``git archive``
                           into the workdir) on the same store (the store's format is the same)

The commands above run with the part cache off (``engines/part_cache.py``). Then each command
of this tree twice more, with the cache in the workdir (``part-cache``, emptied first): *cold*,
filling it, and *warm*, the same command in a fresh process reading the states the first kept;
with the cache's size on disk after the cold run. And ``diagnose late vs early`` (the last tenth
of the steps against the first) cold, and warm after ``diagnose late`` alone filled the cache:
a view sharing part of its work with an earlier one. Last, the first views after an ingest:
``ingest`` of the dumps into a scratch store with the cache off, and ``ingest --warm`` into
another with the cache emptied, then ``report``, ``explain`` and ``diagnose`` on that one (each
the first view after the ingest, reading the states ``--warm`` kept).

Writes the sections "## Long runs: explain and diagnose over 1,000 steps" and "## The part
cache" of --write (the rest of the file kept) and the raw numbers to the workdir's
long_runs.json. A workdir of an earlier
run is reused as it is: its dumps (told by their marker) and stores are not made again, so
``--workdir`` points the bench at existing stores (``store_<size>M_<steps>``, the run named
``bench``, beside ``dumps_<size>M_<steps>``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from run import BenchError, log, measure, run_quiet
from sections import replace_section
from views import exit_0_or_3, mctl, rounds, slug

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SECTION = "## Long runs: explain and diagnose over 1,000 steps"
CACHE_SECTION = "## The part cache"
RUN = "bench"


def ensure_dumps(dumps: Path, positions: int, steps: int, growth: float, timeout: float) -> dict:
    """The dumps of gen_dumps.py unless ``dumps`` holds them already (its marker)."""
    marker_path = dumps / "bench-size.json"
    want = {"positions": positions, "steps": steps, "growth": growth, "seed": 0}
    with contextlib.suppress(OSError, ValueError):
        marker = json.loads(marker_path.read_text())
        if {k: marker.get(k) for k in want} == want:
            log(f"reusing dumps in {dumps} ({marker['written']:,} positions)")
            return marker
    if dumps.exists():
        shutil.rmtree(dumps)
    log(f"generating {positions:,} positions over {steps} steps into {dumps}")
    gen = [sys.executable, str(BENCH / "gen_dumps.py"), str(dumps), "--tokens", str(positions)]
    out = run_quiet([*gen, "--steps", str(steps), "--growth", str(growth)], timeout)
    marker = {**want, "written": int(out.split()[-1])}
    marker_path.write_text(json.dumps(marker) + "\n")
    return marker


def ingest(dumps: Path, store: Path, timeout: float) -> dict[str, Any]:
    """The dumps as run ``bench`` (reused when the store holds them already)."""
    with contextlib.suppress(BenchError, ValueError):
        runs = json.loads(run_quiet(mctl(ROOT, "runs", "--json", "--store", str(store)), 120))
        tokens = sum(int(r["model_tokens"]) for r in runs if r["run"] == RUN)
        if tokens:
            log(f"reusing the store {store}")
            return {"model_tokens": tokens}
    if store.exists():
        shutil.rmtree(store)
    cmd = mctl(ROOT, "ingest", str(dumps), "--run", RUN, "--store", str(store), "-q")
    got = measure(cmd, f"ingest-{store.name}", store.parent / "logs", timeout)
    runs = json.loads(run_quiet(mctl(ROOT, "runs", "--json", "--store", str(store)), timeout))
    got["model_tokens"] = sum(int(r["model_tokens"]) for r in runs if r["run"] == RUN)
    return got


def commands(store: Path, steps: int, before: Path | None) -> dict[str, list[str]]:
    s = ["--store", str(store), "--json", os.devnull, "-q"]
    tenth = max(1, steps // 10)
    late = f"{RUN}@steps={steps - tenth}..{steps - 1}"
    early = f"{RUN}@steps=0..{tenth - 1}"
    out = {
        "report": mctl(ROOT, "report", RUN, *s),
        "explain": mctl(ROOT, "explain", RUN, *s),
        "explain --no-bootstrap": mctl(ROOT, "explain", RUN, "--no-bootstrap", *s),
        "explain late vs early": mctl(ROOT, "explain", late, "--baseline", early, *s),
        "diagnose": exit_0_or_3(mctl(ROOT, "diagnose", RUN, *s)),
    }
    if before is not None:
        out["explain@before"] = mctl(before, "explain", RUN, *s)
        out["diagnose@before"] = exit_0_or_3(mctl(before, "diagnose", RUN, *s))
    return out


def export(rev: str, workdir: Path) -> Path:
    """The code of ``rev``, exported (``git archive``: no worktree registered)."""
    path = workdir / f"tree-{rev}"
    if not path.exists():
        path.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", rev], cwd=ROOT, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(path)], input=archive, check=True)
    return path


def warm_up(workdir: Path, trees: list[Path], timeout: float) -> None:
    """Each tree's compiled kernels cached: its report, explain and diagnose on a small store."""
    dumps, store = workdir / "dumps_warmup", workdir / "store_warmup"
    ensure_dumps(dumps, 200_000, 3, 1.0, timeout)
    ingest(dumps, store, timeout)
    s = ["--store", str(store), "--json", os.devnull, "-q"]
    for tree in trees:
        for verb in ("report", "explain", "diagnose"):
            cmd = mctl(tree, verb, RUN, *s)
            measure(exit_0_or_3(cmd), f"warm-{tree.name}-{verb}", workdir / "logs", timeout)


def after_commands(store: Path, steps: int) -> dict[str, tuple[list[str], list[str]]]:
    """Commands timed warm after another filled the cache: a view that shares part of its
    work with the first (``diagnose late vs early`` after ``diagnose late``: the late steps'
    states kept, their cubes moved to the spec that the early steps widen)."""
    s = ["--store", str(store), "--json", os.devnull, "-q"]
    tenth = max(1, steps // 10)
    late = f"{RUN}@steps={steps - tenth}..{steps - 1}"
    early = f"{RUN}@steps=0..{tenth - 1}"
    first = exit_0_or_3(mctl(ROOT, "diagnose", late, *s))
    then = exit_0_or_3(mctl(ROOT, "diagnose", late, "--baseline", early, *s))
    return {"diagnose late vs early, after diagnose late": (first, then)}


def cold_and_warm(
    cmds: dict[str, list[str]],
    repeats: int,
    workdir: Path,
    timeout: float,
    after: dict[str, tuple[list[str], list[str]]] | None = None,
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Each command with the part cache on: cold (the cache emptied first, then filled by the
    command; its size on disk after) and warm (the command again), ``repeats`` rounds; each
    of ``after``'s second commands cold, and warm after its first (untimed) filled the cache."""
    cache = workdir / "part-cache"
    env = {**os.environ, "MISMATCHCTL_CACHE_DIR": str(cache)}
    env.pop("MISMATCHCTL_CACHE_MB", None)
    after = after or {}
    names = [*cmds, *after]
    got: dict[str, dict[str, list[dict[str, Any]]]] = {n: {"cold": [], "warm": []} for n in names}
    for r in range(repeats):
        for name in names:
            shutil.rmtree(cache, ignore_errors=True)
            for phase in ("cold", "warm"):
                cmd = cmds[name] if name in cmds else after[name][1]
                if phase == "warm" and name in after:  # the cache filled by the first only
                    shutil.rmtree(cache, ignore_errors=True)
                    measure(after[name][0], f"cache-fill-{slug(name)}-{r}", workdir / "logs",
                            timeout, env=env)  # fmt: skip
                m = measure(
                    cmd, f"cache-{phase}-{slug(name)}-{r}", workdir / "logs", timeout, env=env
                )
                if phase == "cold":
                    m["cache_mb"] = sum(p.stat().st_size for p in cache.glob("*")) / 2**20
                got[name][phase].append(m)
                log(f"part cache, round {r + 1}: {name} {phase}: {m['cpu']:.1f} s CPU")
    shutil.rmtree(cache, ignore_errors=True)
    return got


def warm_ingest(dumps: Path, workdir: Path, timeout: float) -> dict[str, dict[str, Any]]:
    """``ingest`` (the cache off) and ``ingest --warm`` (the cache emptied) of the dumps into
    scratch stores, then each view's first run on the warm one: what ``--warm`` costs at ingest
    and what the first views cost after it."""
    cache = workdir / "part-cache"
    env = {**os.environ, "MISMATCHCTL_CACHE_DIR": str(cache)}
    env.pop("MISMATCHCTL_CACHE_MB", None)
    off = {**os.environ, "MISMATCHCTL_CACHE_MB": "0"}
    plain, warm = workdir / "store_scratch_plain", workdir / "store_scratch_warm"
    got: dict[str, dict[str, Any]] = {}
    try:
        for store in (plain, warm):
            shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
        ing = mctl(ROOT, "ingest", str(dumps), "--run", RUN, "-q", "--store")
        got["ingest"] = measure([*ing, str(plain)], "ingest-plain", workdir / "logs", timeout,
                                env=off)  # fmt: skip
        got["ingest --warm"] = measure(
            [*ing, str(warm), "--warm"], "ingest-warm", workdir / "logs", timeout, env=env
        )
        got["ingest --warm"]["cache_mb"] = sum(p.stat().st_size for p in cache.glob("*")) / 2**20
        s = ["--store", str(warm), "--json", os.devnull, "-q"]
        views = {
            "report": mctl(ROOT, "report", RUN, *s),
            "explain": mctl(ROOT, "explain", RUN, *s),
            "diagnose": exit_0_or_3(mctl(ROOT, "diagnose", RUN, *s)),
        }
        for name, cmd in views.items():
            got[f"{name} after ingest --warm"] = measure(
                cmd, f"after-warm-{slug(name)}", workdir / "logs", timeout, env=env
            )
            log(f"{name} after ingest --warm: {got[f'{name} after ingest --warm']['cpu']:.1f} s")
    finally:
        for store in (plain, warm):
            shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
    return got


def warm_table(off: dict[str, list[dict[str, Any]]], got: dict[str, dict[str, Any]]) -> list[str]:
    """``ingest`` and ``ingest --warm``, and the first views after it, against the report's
    CPU with the cache off."""
    base = statistics.median(m["cpu"] for m in off["report"])
    rows = [
        "| command | CPU s | x report CPU | wall s | peak RSS MB |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, m in got.items():
        rows.append(
            f"| `{name}` | {m['cpu']:.1f} | {m['cpu'] / base:.2f} | {m['wall']:.2f} | "
            f"{m['rss_mb']:.0f} |"
        )
    return rows


def cache_table(off: dict[str, list[dict[str, Any]]], cached: dict[str, dict]) -> list[str]:
    """CPU and peak RSS with the cache off, cold and warm (medians), against the report's CPU
    with the cache off; the cache's size once the command filled it."""
    base = statistics.median(m["cpu"] for m in off["report"])
    rows = [
        "| command | CPU s: off / cold / warm | warm x report CPU | wall s: cold / warm | "
        "peak RSS MB: cold / warm | cache MB |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, phases in cached.items():
        cold, warm = phases["cold"], phases["warm"]
        was = f"{_med(off[name], 'cpu'):.1f}" if name in off else "-"
        rows.append(
            f"| `{name}` | {was} / {_med(cold, 'cpu'):.1f} / "
            f"{_med(warm, 'cpu'):.1f} | {_med(warm, 'cpu') / base:.2f} | "
            f"{_med(cold, 'wall'):.2f} / {_med(warm, 'wall'):.2f} | "
            f"{max(m['rss_mb'] for m in cold):.0f} / {max(m['rss_mb'] for m in warm):.0f} | "
            f"{_med(cold, 'cache_mb'):.1f} |"
        )
    return rows


def _med(ms: list[dict[str, Any]], key: str) -> float:
    return statistics.median(m[key] for m in ms)


def table(runs: dict[str, list[dict[str, Any]]], before: str | None) -> list[str]:
    """Wall and CPU time (medians; CPU is steadier than wall on cores shared with other jobs)
    against the report's, and the peak RSS."""
    base = statistics.median(m["wall"] for m in runs["report"])
    base_cpu = statistics.median(m["cpu"] for m in runs["report"])
    rows = [
        "| command | median s (min-max) | x report | CPU s | x report CPU | peak RSS MB |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, ms in runs.items():
        walls = sorted(m["wall"] for m in ms)
        med, cpu = statistics.median(walls), statistics.median(m["cpu"] for m in ms)
        label = name.replace("@before", f" at {before}")
        rows.append(
            f"| `{label}` | {med:.2f} ({walls[0]:.2f}-{walls[-1]:.2f}) | {med / base:.2f} | "
            f"{cpu:.1f} | {cpu / base_cpu:.2f} | {max(m['rss_mb'] for m in ms):.0f} |"
        )
    return rows


def section(result: dict[str, Any]) -> str:
    head = (
        f"`python bench/long_runs.py --size {result['size']:g} --steps "
        f"{','.join(str(s['steps']) for s in result['stores'])} --growth {result['growth']:g} "
        f"--repeats {result['repeats']}"
        f"{' --before ' + result['before'] if result['before'] else ''}`: the same "
        f"{result['size']:g}M response positions (bench/gen_dumps.py, the later turns' K3 rising "
        f"{result['growth']:g}x over the run) over each number of steps, ingested into a store "
        "each; every command in a fresh process, after an untimed report and explain, "
        f"{result['repeats']} alternating round(s), medians; {os.cpu_count()} cores shared with "
        f"other jobs (load average when it ran: {result['load']}). `explain late vs early` is the "
        "last tenth of the steps against the first."
    )
    parts = [head]
    for s in result["stores"]:
        parts.append(
            f"### {s['model_tokens'] / 1e6:.1f}M model tokens over {s['steps']:,} steps\n\n"
            + "\n".join(table(s["runs"], result["before"]))
        )
    return "\n\n".join(parts)


def cache_section(result: dict[str, Any]) -> str:
    head = (
        f"`python bench/long_runs.py --size {result['size']:g} --steps "
        f"{','.join(str(s['steps']) for s in result['stores'])} --growth {result['growth']:g} "
        f'--repeats {result["repeats"]}`, on the stores of its "Long runs" section: each '
        "command with the part cache (`engines/part_cache.py`) in the bench's workdir, emptied "
        "before each *cold* run (which reads the tokens and fills the cache), then *warm*: the "
        "same command in a fresh process, every part's states read from the cache. *off* is "
        "the command with the cache off, in the same run. `warm x report CPU` is against the "
        "report with the cache off; `cache MB` is the cache's size on disk after the cold "
        "run. `diagnose late vs early, after diagnose late` is warm after the cache was "
        "emptied and filled by `diagnose` of the late steps alone (the last tenth of the steps; "
        "the early ones the first tenth): what a baseline costs once its target was diagnosed. "
        f"{result['repeats']} round(s), medians; {os.cpu_count()} cores shared with other "
        f"jobs (load average when it ran: {result['load']})."
    )
    parts = [head]
    for s in result["stores"]:
        if "cache" not in s:
            continue
        parts.append(
            f"### {s['model_tokens'] / 1e6:.1f}M model tokens over {s['steps']:,} steps\n\n"
            + "\n".join(cache_table(s["runs"], s["cache"]))
        )
        if "warm_ingest" in s:
            parts.append(
                f"After `ingest --warm`, {s['model_tokens'] / 1e6:.1f}M model tokens over "
                f"{s['steps']:,} steps (the cache's size after the ingest: "
                f"{s['warm_ingest']['ingest --warm']['cache_mb']:.1f} MB):\n\n"
                + "\n".join(warm_table(s["runs"], s["warm_ingest"]))
            )
    return "\n\n".join(parts)


def write(result: dict[str, Any], path: Path | None) -> None:
    """Print both sections; replace them in ``path`` when given."""
    text, cache = section(result), cache_section(result)
    print(text + "\n\n" + cache)
    if path:
        replace_section(path, SECTION, text)
        replace_section(path, CACHE_SECTION, cache)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=float, default=100, help="millions of response positions")
    parser.add_argument("--steps", default="10,1000", help="comma-separated step counts")
    parser.add_argument("--growth", type=float, default=8.0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--before", help="a git revision whose explain and diagnose are timed")
    parser.add_argument("--only", help="comma-separated command names (report is kept)")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--write", type=Path, help="replace this Markdown file's section")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument(
        "--render", type=Path, help="write the section of an earlier run's long_runs.json"
    )
    args = parser.parse_args()
    if args.render is not None:
        write(json.loads(args.render.read_text()), args.write)
        return
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: bytecode cached
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mismatchctl-long-"))
    workdir.mkdir(parents=True, exist_ok=True)
    before = export(args.before, workdir) if args.before else None
    warm_up(workdir, [ROOT, *([before] if before else [])], args.timeout)
    result: dict[str, Any] = {
        "size": args.size, "growth": args.growth, "repeats": args.repeats,
        "before": args.before, "stores": [],
    }  # fmt: skip
    for steps in (int(s) for s in args.steps.split(",")):
        dumps = workdir / f"dumps_{args.size:g}M_{steps}"
        marker = ensure_dumps(dumps, int(args.size * 1e6), steps, args.growth, args.timeout)
        store = workdir / f"store_{args.size:g}M_{steps}"
        ingested = ingest(dumps, store, args.timeout)
        cmds = commands(store, steps, before)
        if args.only:
            keep = {"report", *(n.strip() for n in args.only.split(","))}
            cmds = {n: c for n, c in cmds.items() if n in keep}
        started = time.time()
        runs = rounds(
            cmds,
            args.repeats,
            workdir / "logs",
            args.timeout,
            tuple(n for n in ("report", "explain") if n in cmds),
        )
        mine = {n: c for n, c in cmds.items() if not n.endswith("@before")}
        after = after_commands(store, steps)
        cached = cold_and_warm(mine, args.repeats, workdir, args.timeout, after)
        warmed = warm_ingest(dumps, workdir, args.timeout)
        result["stores"].append({
            "steps": steps, "positions": marker["written"], "ingest": ingested,
            "model_tokens": ingested["model_tokens"], "runs": runs, "cache": cached,
            "warm_ingest": warmed, "seconds": time.time() - started,
        })  # fmt: skip
    result["load"] = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    (workdir / "long_runs.json").write_text(json.dumps(result, indent=1) + "\n")
    write(result, args.write)


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        raise SystemExit(str(e)) from None
