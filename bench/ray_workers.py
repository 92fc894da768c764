"""`--engine ray` on a local Ray of 1 and of 2 workers (CPUs), against the local engine.

    python bench/ray_workers.py --tokens 2e7 --repeats 3 --write docs/benchmarks.md

Generates dumps (bench/gen_dumps.py), then for each worker count runs a fresh process that starts
a local Ray with that many CPUs (timed), warms its worker processes up, and times: `ingest --engine
ray` into a fresh store, `report --by-gpu` with the Ray engine and with the local engine (threads),
each `--repeats` times (median), then reads the peak resident memory (Linux `VmHWM`) of the
driver and of every process of the local Ray (its workers, the raylet, the GCS server and the rest
of Ray's own services). `--write` replaces the section "## Ray: 1 vs 2 local workers" of
the Markdown file, read afresh just before writing (other sections are left as they are).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sections import replace_section

GEN_DUMPS = Path(__file__).parent / "gen_dumps.py"
SECTION = "## Ray: 1 vs 2 local workers"


def _timed(func: Callable[[], Any], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        out.append(time.perf_counter() - start)
    return out


def _warm() -> None:
    """Import what the tasks use (a Ray worker process starts empty)."""
    import mismatchctl.engines.local
    import mismatchctl.ingest.run_ingest  # noqa: F401


def _role(cmd: str) -> str:
    """A local Ray process's role from its command line. The raylet's arguments name the
    worker script, and Ray's agents are named ``ray::...Agent`` like its workers, so the order
    of these tests matters."""
    program = cmd.split(" ", 1)[0]
    if program.endswith("/raylet"):
        return "raylet"
    if program.endswith("/gcs_server"):
        return "gcs"
    if program.startswith("ray::") and not program.endswith("Agent"):
        return "worker"
    if "default_worker.py" in cmd:
        return "worker"
    return "other"


def _peak_mb(pid: int | str) -> float:
    """A process's peak resident set (VmHWM) in MB; 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _descendants(root: int) -> list[int]:
    """The processes started under ``root`` (a local Ray's services are the driver's children,
    its workers the raylet's), so another Ray on the machine is not counted."""
    parents: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text()
            except OSError:
                continue
            parents[int(proc.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        kids = [child for child, parent in parents.items() if parent == pid]
        found += kids
        todo += kids
    return found


def _ray_peaks() -> dict[str, list[float]]:
    """The peak RSS of each process of this driver's local Ray, by role ("other": Ray's remaining
    services, such as its log monitor and its dashboard agent)."""
    peaks: dict[str, list[float]] = {"worker": [], "raylet": [], "gcs": [], "other": []}
    for pid in _descendants(os.getpid()):
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        cmd = raw.replace(b"\0", b" ").decode(errors="replace")
        peaks[_role(cmd)].append(_peak_mb(pid))
    return peaks


def child(workers: int, dumps: Path, workdir: Path, repeats: int) -> dict[str, Any]:
    """One worker count, in its own process (one Ray per process)."""
    import mismatchctl
    from mismatchctl.parallel import connect, remote

    start = time.perf_counter()
    ray = connect(None, workers)
    started = time.perf_counter() - start
    ray.get([remote(_warm).remote() for _ in range(2 * workers)])
    stores = iter(workdir / f"store_{workers}_{i}" for i in range(repeats))
    inputs = [str(dumps)]

    def ingest() -> None:
        mismatchctl.ingest(inputs, run="bench", store=next(stores), engine="ray", workers=workers)

    ingest_s = _timed(ingest, repeats)
    store = workdir / f"store_{workers}_0"
    parts = len(mismatchctl.open_store(store).parts("bench"))
    tokens = mismatchctl.run_info("bench", store).model_tokens
    ray_s = _timed(
        lambda: mismatchctl.report(by_gpu=True, store=store, engine="ray", workers=workers),
        repeats,
    )
    local_s = _timed(lambda: mismatchctl.report(by_gpu=True, store=store, workers=workers), repeats)
    peaks = _ray_peaks()
    ray.shutdown()
    return {
        "workers": workers,
        "start_s": started,
        "ingest_s": statistics.median(ingest_s),
        "ray_report_s": statistics.median(ray_s),
        "local_report_s": statistics.median(local_s),
        "parts": parts,
        "tokens": tokens,
        "files": len(list(dumps.glob("*.parquet"))),
        "driver_mb": _peak_mb("self"),
        "worker_mb": max(peaks["worker"], default=0.0),
        "workers_seen": len(peaks["worker"]),
        "raylet_mb": max(peaks["raylet"], default=0.0),
        "gcs_mb": max(peaks["gcs"], default=0.0),
        "other_mb": sum(peaks["other"]),
    }


def run(tokens: int, repeats: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        dumps = Path(tmp) / "dumps"
        gen = [sys.executable, str(GEN_DUMPS), str(dumps), "--tokens", str(tokens)]
        subprocess.run(gen, check=True, capture_output=True)
        rows = []
        for workers in (1, 2):
            cmd = [sys.executable, __file__, "--child", str(workers), "--dumps", str(dumps)]
            cmd += ["--workdir", tmp, "--repeats", str(repeats)]
            done = subprocess.run(cmd, check=True, capture_output=True, text=True)
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        return rows


def table(rows: list[dict[str, Any]], repeats: int) -> str:
    import mismatchctl

    try:
        import ray

        ray_version = ray.__version__
    except ImportError:
        ray_version = "?"
    first = rows[0]
    size = f"{first['positions'] / 1e6:g}e6"
    lines = [
        f"Written by `python bench/ray_workers.py --tokens {size} --repeats {repeats} "
        f"--write docs/benchmarks.md`: {first['tokens'] / 1e6:.1f}M model tokens in "
        f"{first['files']} dump files, {first['parts']} token parts. Each worker count runs in "
        "a fresh process that starts a local Ray with that many CPUs (*Ray start*), warms its "
        "worker processes up, then times `ingest --engine ray` (one task per file, into a fresh "
        "store) and `report --by-gpu` with `--engine ray` (one task per part) and with the local "
        f"engine (`--workers` threads) in the same process; medians of {repeats} rounds. Then "
        "the peak resident memory (VmHWM) of the driver (this process: the Ray client, the "
        "local engine's report and the merges) and of each process of the local Ray: the "
        "largest of its workers, the raylet, the GCS server, and Ray's other services summed.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, Ray {ray_version}, mismatchctl {mismatchctl.__version__}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| workers | Ray start | ingest (ray) | report (ray) | report (local) | driver peak "
        "| largest worker peak | raylet | GCS | Ray's other services |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['workers']} | {r['start_s']:.1f} s | {r['ingest_s']:.1f} s | "
            f"{r['ray_report_s']:.1f} s | {r['local_report_s']:.1f} s | "
            f"{r['driver_mb']:.0f} MB | {r['worker_mb']:.0f} MB (of {r['workers_seen']}) | "
            f"{r['raylet_mb']:.0f} MB | {r['gcs_mb']:.0f} MB | {r['other_mb']:.0f} MB |"
        )
    one, two = rows[0], rows[-1]
    lines += [
        "",
        f"2 workers vs 1: ingest {one['ingest_s'] / two['ingest_s']:.2f}x as fast, report (ray) "
        f"{one['ray_report_s'] / two['ray_report_s']:.2f}x. Ray's fixed costs (starting the "
        "local Ray, shipping the package to the workers) are paid once per process; each task "
        "returns only the small partial aggregates of its part.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=float, default=2e7, help="response positions")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write", type=Path, help="update this Markdown file's section")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--dumps", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.dumps, args.workdir, args.repeats)))
        return
    rows = run(int(args.tokens), args.repeats)
    for row in rows:
        row["positions"] = args.tokens
    body = table(rows, args.repeats)
    print(body)
    if args.write:
        replace_section(args.write, SECTION, body)


if __name__ == "__main__":
    main()
