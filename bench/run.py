"""Report speed vs what users reach for (issue #7): one command, from dumps to docs/benchmarks.md.

    pip install -e '.[bench]'     # pandas and DuckDB for the baselines
    python bench/run.py --sizes 20,100 --repeats 3 --write docs/benchmarks.md [--workdir DIR] [--keep]

For each size (millions of response positions): generate realistic dumps (bench/gen_dumps.py:
sequence layout, responses of 50-4000 tokens, multi-turn, 20 steps, 3 gpus; reused when --workdir
already holds them), ingest them into a fresh store as run `bench` and again as `bench2` with the
two sides swapped (timed: wall, peak RSS, model tokens/s), then time, alternating round-robin for --repeats rounds (the
starting command rotates every round), each in a fresh subprocess measured with wait4:

    report   python -m mismatchctl report bench --by-gpu --json /dev/null -q   (every split)
    report-ab  python -m mismatchctl report bench bench2 --by-gpu --json /dev/null -q  (both runs)
    compare  python -m mismatchctl compare bench bench2 --json /dev/null -q
    pandas   python bench/w_pandas.py STORE        workload W (bench/wcommon.py), pandas
    duckdb   python bench/w_duckdb.py STORE        workload W, DuckDB SQL
    polars   python bench/w_polars.py STORE        workload W, Polars lazy + streaming engine
    duckdb-raw  python bench/w_duckdb_raw.py DUMPS   W over the raw dumps (no store), DuckDB
    polars-raw  python bench/w_polars_raw.py DUMPS   W over the raw dumps (no store), Polars
    floor    python bench/floor.py STORE           read and decode W's columns with pyarrow

The W scripts must agree with each other (1e-6 relative, token counts exactly) and with the
report's own numbers, or the bench stops. The section ends with the targets of the third
performance round (issue #22) at the largest size. Results: a Markdown section written to --write (the
section is replaced, the rest of the file kept) and raw JSON in the workdir (results.json).
Without --keep the stores, and the dumps this invocation generated, are removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import math
import os
import platform
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from sections import replace_section

# The driver imports nothing heavy (no numpy, pyarrow): Python starts children with vfork, and a
# child's ru_maxrss starts from the high-water RSS of the process it was forked from.

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SECTION = "## Report speed vs what users reach for"
STEPS, SEED = 20, 0
RUN, RUN2 = "bench", "bench2"
SWAPPED = ["--map", "rollout=old_log_probs", "--map", "trainer=rollout_log_probs"]
# Disk per response position: dumps (~10 B) + two ingested runs + a scratch one (~11 B each).
DISK_BYTES_PER_TOKEN = 50
# Peak RSS of the pandas script per model token (measured: ~170 B at 10M), to skip it before it
# could exhaust the memory of a shared machine.
PANDAS_BYTES_PER_TOKEN = 170
# A child's ru_maxrss is at least the driver's own high-water RSS (exec keeps it): stay far below.
DRIVER_RSS_LIMIT_MB = 100
REL_TOL = 1e-6

IMPLS = (
    "report",
    "report-ab",
    "compare",
    "pandas",
    "duckdb",
    "polars",
    "duckdb-raw",
    "polars-raw",
    "floor",
)
LABELS = {
    "report": "`mismatchctl report` (every split)",
    "report-ab": "`mismatchctl report` of both runs",
    "compare": "`mismatchctl compare` (two runs)",
    "pandas": "pandas script (W)",
    "duckdb": "DuckDB query (W)",
    "polars": "Polars streaming (W)",
    "duckdb-raw": "DuckDB query (W) over the raw dumps",
    "polars-raw": "Polars streaming (W) over the raw dumps",
    "floor": "floor: pyarrow reads W's columns",
}
W_IMPLS = ("pandas", "duckdb", "polars", "duckdb-raw", "polars-raw")
RAW_IMPLS = ("duckdb-raw", "polars-raw")  # W over the dumps as written, no store


class BenchError(SystemExit):
    """Stops the bench with a message (exit status 1)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"bench/run.py: error: {message}")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Measuring one command


def without_part_cache() -> dict[str, str]:
    """The environment with the part cache off (``engines/part_cache.py``): a benchmark times
    the read of the tokens, not states an earlier round kept, unless it asks for the cache."""
    return {**os.environ, "MISMATCHCTL_CACHE_MB": "0"}


def measure(
    cmd: list[str],
    name: str,
    logs: Path,
    timeout: float,
    stdout: bool = False,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``cmd`` in a fresh process: {"wall": s, "cpu": user + system s, "rss_mb": peak RSS
    in MB (ru_maxrss / 1024), "stdout": text when asked}. Raises BenchError if it fails or
    outlives ``timeout`` seconds. ``env``: the process's environment (default: this one's with
    the part cache off)."""
    logs.mkdir(parents=True, exist_ok=True)
    out_path, err_path = logs / f"{name}.out", logs / f"{name}.err"
    env = without_part_cache() if env is None else env
    with open(err_path, "wb") as err, open(out_path if stdout else os.devnull, "wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=ROOT, env=env
        )
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = err_path.read_text(errors="replace")[-3000:]
        why = (
            f"timed out after {timeout:.0f} s"
            if wall >= timeout and proc.returncode < 0
            else f"exit status {proc.returncode}"
        )
        raise BenchError(f"{shlex.join(cmd)}: {why}\n--- stderr (tail) ---\n{tail}")
    result: dict[str, Any] = {
        "wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024
    }  # fmt: skip
    if stdout:
        result["stdout"] = out_path.read_text()
    return result


def run_quiet(cmd: list[str], timeout: float) -> str:
    """A helper command's stdout (not timed)."""
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False
        )
    except subprocess.TimeoutExpired:
        raise BenchError(f"{shlex.join(cmd)}: timed out after {timeout:.0f} s") from None
    if done.returncode != 0:
        raise BenchError(f"{shlex.join(cmd)}: exit status {done.returncode}\n{done.stderr[-3000:]}")
    return done.stdout


# ---------------------------------------------------------------------------------------------
# Commands


def mctl(*args: str) -> list[str]:
    return [sys.executable, "-m", "mismatchctl", *args]


def impl_command(impl: str, store: Path, dumps: Path | None = None) -> list[str]:
    if impl in RAW_IMPLS:
        assert dumps is not None
        return [sys.executable, str(BENCH / f"w_{impl.replace('-', '_')}.py"), str(dumps)]
    if impl == "report":
        return mctl("report", RUN, "--by-gpu", "--json", os.devnull, "-q", "--store", str(store))
    if impl == "report-ab":
        return mctl(
            "report", RUN, RUN2, "--by-gpu", "--json", os.devnull, "-q", "--store", str(store)
        )
    if impl == "compare":
        return mctl("compare", RUN, RUN2, "--json", os.devnull, "-q", "--store", str(store))
    script = {"pandas": "w_pandas.py", "duckdb": "w_duckdb.py", "polars": "w_polars.py"}.get(
        impl, "floor.py"
    )
    return [sys.executable, str(BENCH / script), str(store), "--run", RUN]


def shown_command(impl: str) -> str:
    """The command as the docs show it (store as STORE, paths relative to the repository)."""
    if impl in RAW_IMPLS:
        return f"python bench/w_{impl.replace('-', '_')}.py DUMPS"
    if impl == "report":
        return "python -m mismatchctl report bench --by-gpu --json /dev/null -q --store STORE"
    if impl == "report-ab":
        return (
            "python -m mismatchctl report bench bench2 --by-gpu --json /dev/null -q --store STORE"
        )
    if impl == "compare":
        return "python -m mismatchctl compare bench bench2 --json /dev/null -q --store STORE"
    script = {"pandas": "w_pandas", "duckdb": "w_duckdb", "polars": "w_polars"}.get(impl, "floor")
    return f"python bench/{script}.py STORE --run bench"


# ---------------------------------------------------------------------------------------------
# Checks: the W implementations agree with each other and with the report


def close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= REL_TOL * max(abs(a), abs(b)) + 1e-12


def compare_digests(ref: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """Differences between two W digests (empty when they agree)."""
    bad: list[str] = []
    if ref["tokens"] != other["tokens"]:
        bad.append(f"tokens {ref['tokens']} != {other['tokens']}")
    if not close(ref["k3_sum"], other["k3_sum"]):
        bad.append(f"total K3 sum {ref['k3_sum']!r} != {other['k3_sum']!r}")
    for table, nkeys in (("gpu_step", 2), ("bin_kind", 2)):
        a = {tuple(row[:nkeys]): row[nkeys:] for row in ref[table]}
        b = {tuple(row[:nkeys]): row[nkeys:] for row in other[table]}
        if a.keys() != b.keys():
            bad.append(f"{table} groups differ: {sorted(a.keys() ^ b.keys(), key=str)[:5]}")
            continue
        for key, values in a.items():
            if values[0] != b[key][0]:
                bad.append(f"{table} {key}: tokens {values[0]} != {b[key][0]}")
            bad.extend(
                f"{table} {key}: value {i} {x!r} != {y!r}"
                for i, (x, y) in enumerate(zip(values[1:], b[key][1:], strict=True), 1)
                if not close(x, y)
            )
    if ref["pearson"].keys() != other["pearson"].keys():
        bad.append(f"pearson kinds {sorted(ref['pearson'])} != {sorted(other['pearson'])}")
    else:
        bad.extend(
            f"pearson {k}: {v!r} != {other['pearson'][k]!r}"
            for k, v in ref["pearson"].items()
            if not close(v, other["pearson"][k])
        )
    return bad


def check_report(report: dict[str, Any], digest: dict[str, Any]) -> list[str]:
    """The report's own numbers against W: gpu x step K3 and counts, the bins' marginals over the
    turn kinds (count, mean r, mean |r|, sum r^2 = 2 kl_k2 x tokens), the turn kinds' Pearson."""
    groups: dict[tuple[str, ...], dict[tuple[Any, ...], dict[str, Any]]] = {}
    for g in report["groups"]:
        keys = tuple(sorted(g["by"]))
        groups.setdefault(keys, {})[tuple(g["by"][k] for k in keys)] = g["metrics"]
    bad: list[str] = []
    gs = groups.get(("gpu", "step"), {})
    for gpu, step, n, k3 in digest["gpu_step"]:
        m = gs.get((gpu, step))
        if m is None or m["tokens"] != n or not close(m["vllm_kl"], k3):
            bad.append(f"gpu x step {gpu}/{step}: report {m and (m['tokens'], m['vllm_kl'])}")
    marg: dict[int, list[float]] = {}
    for b, _kind, n, mean_r, mean_abs, sum_r2 in digest["bin_kind"]:
        acc = marg.setdefault(b, [0, 0.0, 0.0, 0.0])
        acc[0] += n
        acc[1] += n * mean_r
        acc[2] += n * mean_abs
        acc[3] += sum_r2
    bins = groups.get(("bin",), {})
    for b, (n, sum_r, sum_abs, sum_r2) in sorted(marg.items()):
        m = bins.get((b,))
        ok = (
            m is not None
            and m["tokens"] == n
            and close(m["log_ratio_mean"], sum_r / n)
            and close(m["abs_log_ratio_mean"], sum_abs / n)
            and close(2 * m["kl_k2"] * n, sum_r2)
        )
        if not ok:
            got = m and (
                m["tokens"],
                m["log_ratio_mean"],
                m["abs_log_ratio_mean"],
                2 * m["kl_k2"] * m["tokens"],
            )
            bad.append(
                f"bin {b} (tokens, mean r, mean |r|, sum r^2): report {got}, "
                f"W {(n, sum_r / n, sum_abs / n, sum_r2)}"
            )
    kinds = groups.get(("turn_kind",), {})
    for kind, r in digest["pearson"].items():
        m = kinds.get((kind,))
        if m is None or not close(m["log_ppl_pearson"], r):
            bad.append(f"turn kind {kind}: log_ppl_pearson {m and m['log_ppl_pearson']} != {r}")
    return bad


def fail_if(bad: list[str], what: str) -> None:
    if bad:
        more = f"\n... and {len(bad) - 10} more" if len(bad) > 10 else ""
        raise BenchError(f"{what} disagree:\n" + "\n".join(bad[:10]) + more)


# ---------------------------------------------------------------------------------------------
# One size


def mem_available_mb() -> float:
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return math.inf


def ensure_dumps(dumps: Path, positions: int, timeout: float) -> tuple[dict[str, Any], bool]:
    """Generate the dumps unless ``dumps`` holds them already; (marker, generated now)."""
    marker_path = dumps / "bench-size.json"
    want = {"positions": positions, "steps": STEPS, "seed": SEED}
    with contextlib.suppress(OSError, ValueError):
        marker = json.loads(marker_path.read_text())
        if {k: marker.get(k) for k in want} == want:
            log(f"reusing dumps in {dumps} ({marker['written']:,} positions)")
            return marker, False
    if dumps.is_symlink():  # never delete what a link points to
        raise BenchError(
            f"{dumps} is a link to dumps without a matching {marker_path.name}: bench/run.py "
            "regenerates the dumps it does not recognise. Hint: remove the link (the dumps are "
            "written there), or link to dumps this script wrote"
        )
    if dumps.exists():
        shutil.rmtree(dumps)
    log(f"generating {positions:,} response positions into {dumps}")
    start = time.perf_counter()
    gen = [sys.executable, str(BENCH / "gen_dumps.py"), str(dumps), "--tokens", str(positions)]
    out = run_quiet([*gen, "--steps", str(STEPS)], timeout)
    marker = {**want, "written": int(out.split()[-1]), "gen_s": time.perf_counter() - start}
    marker_path.write_text(json.dumps(marker) + "\n")
    return marker, True


def model_tokens(store: Path, run: str, timeout: float) -> int:
    runs = json.loads(run_quiet(mctl("runs", "--json", "--store", str(store)), timeout))
    for r in runs:
        if r["run"] == run:
            return int(r["model_tokens"])
    raise BenchError(f"run {run} is not in {store} after ingest")


def run_size(millions: float, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    label = f"{millions:g}M"
    dumps, store = workdir / f"dumps_{label}", workdir / f"store_{label}"
    scratch, logs = workdir / f"scratch_{label}", workdir / "logs" / label
    positions = int(millions * 1e6)
    need = positions * DISK_BYTES_PER_TOKEN
    free = shutil.disk_usage(workdir).free
    if free < need:
        raise BenchError(
            f"{label}: needs about {need / 1e9:.1f} GB free in {workdir}, has {free / 1e9:.1f} GB"
        )
    marker, generated = ensure_dumps(dumps, positions, args.timeout)
    result: dict[str, Any] = {
        "label": label,
        "millions": millions,
        "positions": marker["written"],
        "gen_s": marker.get("gen_s"),
        "ingest": [],
        "impls": {},
    }
    try:
        # -- ingest: bench into a fresh store, bench2 into the same store, extra rounds scratch
        for path in (store, scratch):
            if path.exists():
                shutil.rmtree(path)
        for i in range(max(args.repeats, 2)):
            target, run = (store, RUN) if i == 0 else (store, RUN2) if i == 1 else (scratch, RUN)
            cmd = mctl("ingest", str(dumps), "--run", run, "-q", "--store", str(target))
            if run == RUN2:  # the same dumps, the sides swapped: a second run with a difference
                cmd += SWAPPED
            m = measure(cmd, f"ingest-{i}", logs, args.timeout)
            m["model_tokens"] = model_tokens(target, run, args.timeout)
            m["tokens_per_s"] = m["model_tokens"] / m["wall"]
            result["ingest"].append(m)
            log(
                f"{label} ingest {i + 1}: {m['wall']:.2f} s, {m['rss_mb']:.0f} MB, "
                f"{m['tokens_per_s'] / 1e6:.1f}M tokens/s"
            )
            if target == scratch:
                shutil.rmtree(scratch)
        tokens = result["ingest"][0]["model_tokens"]
        result["model_tokens"] = tokens
        time_impls(result, store, logs, args, dumps)
    finally:
        if not args.keep:
            for path in (store, scratch, *([dumps] if generated else [])):
                shutil.rmtree(path, ignore_errors=True)
    return result


def time_impls(
    result: dict[str, Any], store: Path, logs: Path, args: argparse.Namespace, dumps: Path
) -> None:
    label, tokens = result["label"], result["model_tokens"]
    impls = list(IMPLS)
    if result["millions"] > args.pandas_max:
        result["impls"]["pandas"] = {"skipped": f"size above --pandas-max {args.pandas_max:g}"}
        impls.remove("pandas")
    else:
        need_mb = tokens * PANDAS_BYTES_PER_TOKEN / 2**20
        avail = mem_available_mb()
        if need_mb > 0.8 * avail:
            result["impls"]["pandas"] = {
                "skipped": f"needs about {need_mb / 1024:.1f} GB, {avail / 1024:.1f} GB available"
            }
            impls.remove("pandas")
    for impl in impls:
        result["impls"][impl] = {"runs": []}

    # Untimed first pass: the report's JSON to check W against, and a warm page cache.
    report_json = logs / "report.json"
    verify = mctl(
        "report", RUN, "--by-gpu", "--json", str(report_json), "-q", "--store", str(store)
    )
    log(f"{label} warm-up: report to {report_json}, floor")
    measure(verify, "verify-report", logs, args.timeout)
    floor = measure(impl_command("floor", store), "verify-floor", logs, args.timeout, stdout=True)
    rows = json.loads(floor["stdout"])["rows"]
    if rows != tokens:
        raise BenchError(f"{label}: the floor read {rows:,} rows, the run has {tokens:,} tokens")
    report = json.loads(report_json.read_text())

    reference: tuple[str, dict[str, Any]] | None = None
    for rnd in range(args.repeats):
        shift = rnd % len(impls)
        for impl in impls[shift:] + impls[:shift]:
            is_w = impl in W_IMPLS or impl == "floor"
            cmd = impl_command(impl, store, dumps)
            m = measure(cmd, f"{impl}-{rnd}", logs, args.timeout, stdout=is_w)
            text = m.pop("stdout", None)
            log(
                f"{label} round {rnd + 1}/{args.repeats} {impl:10s} {m['wall']:7.2f} s "
                f"{m['rss_mb']:6.0f} MB"
            )
            result["impls"][impl]["runs"].append(m)
            if impl not in W_IMPLS:
                continue
            digest = json.loads(text or "null")
            if digest is None or digest.get("tokens") != tokens:
                raise BenchError(f"{label} {impl}: digest {str(digest)[:200]}, expected {tokens:,}")
            if reference is None:
                reference = (impl, digest)
                fail_if(check_report(report, digest), f"{label}: the report and {impl}")
                result["digest"] = {k: digest[k] for k in ("tokens", "k3_sum", "pearson")}
            else:
                fail_if(
                    compare_digests(reference[1], digest), f"{label}: {reference[0]} and {impl}"
                )
    if reference is None:
        raise BenchError("no W implementation ran: nothing to check the report against")
    log(f"{label}: W implementations agree with each other and with the report")

    for entry in result["impls"].values():
        if entry.get("runs"):
            walls = [r["wall"] for r in entry["runs"]]
            entry.update(
                median=statistics.median(walls),
                min=min(walls),
                max=max(walls),
                rss_mb=max(r["rss_mb"] for r in entry["runs"]),
            )
    walls = [m["wall"] for m in result["ingest"]]
    result["ingest_summary"] = {
        "median": statistics.median(walls),
        "min": min(walls),
        "max": max(walls),
        "rss_mb": max(m["rss_mb"] for m in result["ingest"]),
        "tokens_per_s": tokens / statistics.median(walls),
    }


# ---------------------------------------------------------------------------------------------
# The machine and the Markdown section


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "machine": platform.machine(),
        "system": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["ram_gb"] = int(line.split()[1]) / 2**20
    for pkg in ("mismatchctl", "pyarrow", "polars", "duckdb", "pandas", "numpy"):
        try:
            info[pkg] = version(pkg)
        except PackageNotFoundError:
            info[pkg] = "not installed"
    info["load_start"] = os.getloadavg()[0]
    info.update(code_state())
    return info


def code_state() -> dict[str, str]:
    """The commit (and whether mismatchctl/ has local changes) and a fingerprint of the package's
    sources: others may edit the tree during a run, which the section must then say."""
    state: dict[str, str] = {}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        git = ["git", "-C", str(ROOT)]
        head = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--", "mismatchctl"], capture_output=True, text=True
        )
        if head.returncode == 0:
            state["commit"] = head.stdout.strip() + (
                " + local changes" if dirty.stdout.strip() else ""
            )
    digest = hashlib.sha1()
    for path in sorted((ROOT / "mismatchctl").rglob("*.py")):
        with contextlib.suppress(OSError):
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    state["sources_sha1"] = digest.hexdigest()[:12]
    return state


def secs(x: float) -> str:
    return f"{x:.2f} s" if x < 100 else f"{x:.0f} s"


def ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}x"


def size_table(res: dict[str, Any]) -> list[str]:
    impls = res["impls"]
    rep = impls["report"]["median"]
    floor = impls["floor"]["median"]
    lines = [
        f"### {res['model_tokens'] / 1e6:.1f}M model tokens ({res['label']} response positions)",
        "",
        "| implementation | median wall | min–max | peak RSS | vs report | vs floor |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for impl in IMPLS:
        e = impls.get(impl)
        if e is None:
            continue
        if "skipped" in e:
            lines.append(f"| {LABELS[impl]} | skipped ({e['skipped']}) | | | | |")
            continue
        lines.append(
            f"| {LABELS[impl]} | {secs(e['median'])} | {e['min']:.2f}–{e['max']:.2f} s | "
            f"{e['rss_mb']:.0f} MB | {ratio(e['median'] / rep)} | {ratio(e['median'] / floor)} |"
        )
    ing = res["ingest_summary"]
    lines += [
        "",
        f"Ingest of the dumps ({res['positions'] / 1e6:.1f}M response positions, "
        f"{len(res['ingest'])} ingests): median {secs(ing['median'])} "
        f"({ing['min']:.2f}–{ing['max']:.2f} s), **{ing['tokens_per_s'] / 1e6:.1f}M model "
        f"tokens/s**, peak RSS {ing['rss_mb']:.0f} MB. "
        f"`compare` / `report` of both runs = "
        f"**{impls['compare']['median'] / impls['report-ab']['median']:.2f}**.",
    ]
    return lines


def targets(results: list[dict[str, Any]]) -> list[str]:
    """The targets of the third performance round (issue #22) at the largest size, and the
    smaller sizes' share of the best peer."""
    big, small = results[-1], results[0]
    im = big["impls"]
    rep = im["report"]
    rows: list[tuple[str, str, bool | None]] = []

    def med(name: str, result: dict[str, Any] = big) -> float | None:
        return result["impls"].get(name, {}).get("median")

    def fastest(result: dict[str, Any], names: tuple[str, ...]) -> tuple[float, str] | None:
        peers = ((med(n, result), n) for n in names)
        return min(((t, n) for t, n in peers if t is not None), default=None)

    floor = med("floor")
    rows.append(
        (
            "report ≤ 2x the read floor",
            f"report / floor = {rep['median'] / floor:.2f}" if floor else "—",
            None if floor is None else rep["median"] <= 2 * floor,
        )
    )
    for where, names in (
        ("the store", ("duckdb", "polars")),
        ("the raw dumps", ("duckdb-raw", "polars-raw")),
    ):
        best = fastest(big, names)
        rows.append(
            (
                f"report ≤ 0.4x the faster of DuckDB and Polars (W over {where})",
                f"report / {best[1]} = {rep['median'] / best[0]:.2f}" if best else "—",
                None if best is None else rep["median"] <= 0.4 * best[0],
            )
        )
    for other in results[:-1]:
        peer = fastest(other, ("duckdb", "polars", "duckdb-raw", "polars-raw"))
        own = other["impls"]["report"]["median"]
        rows.append(
            (
                f"{other['label']}: report ≤ 0.8x the best peer",
                f"report / {peer[1]} = {own / peer[0]:.2f}" if peer else "—",
                None if peer is None else own <= 0.8 * peer[0],
            )
        )
    pandas = med("pandas")
    if pandas:
        rows.append(("report ≥ 4x faster than the pandas script (first round)",
                     f"pandas / report = {pandas / rep['median']:.2f}", pandas / rep["median"] >= 4))  # fmt: skip
    rss = rep["rss_mb"]  # MiB (ru_maxrss / 1024)
    rows.append(("report peak RSS ≤ 0.5 GB", f"{rss * 2**20 / 1e9:.2f} GB", rss * 2**20 <= 0.5e9))
    if len(results) > 1:
        growth = big["impls"]["report"]["rss_mb"] / small["impls"]["report"]["rss_mb"] - 1
        rows.append(
            (
                f"report peak RSS grows < 20% from {small['label']} to {big['label']}",
                f"{small['impls']['report']['rss_mb']:.0f} → {rep['rss_mb']:.0f} MB "
                f"({growth:+.0%})",
                growth < 0.2,
            )
        )
    else:
        rows.append(("report peak RSS grows < 20% from 10M to 100M", "one size only", None))
    tps = big["ingest_summary"]["tokens_per_s"]
    rows.append(("ingest ≥ 15M model tokens/s", f"{tps / 1e6:.1f}M tokens/s", tps >= 15e6))
    cmp = im["compare"]["median"] / im["report-ab"]["median"]
    rows.append(("compare ≤ 1.15x the report of both runs (#46)", f"compare / report-ab = {cmp:.2f}", cmp <= 1.15))  # fmt: skip

    verdict = {True: "pass", False: "**fail**", None: "not measured"}
    note = (
        ""
        if big["millions"] >= 100
        else f" (the targets are set for 100M tokens; this run's largest size is {big['label']})"
    )
    lines = [
        f"### Targets at {big['label']}{note}",
        "",
        "| target | measured | |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {t} | {m} | {verdict[ok]} |" for t, m, ok in rows]
    return lines


def _public(argv: list[str]) -> list[str]:
    """The arguments that shape the results: without --workdir (a local path) and --keep."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--workdir":
            skip = True
        elif not (arg.startswith("--workdir=") or arg == "--keep"):
            out.append(arg)
    return out


def section(results: list[dict[str, Any]], info: dict[str, Any], argv: list[str], note: str) -> str:
    repeats = len(results[0]["impls"]["report"]["runs"])
    lines = [
        SECTION,
        "",
        "Written by `" + shlex.join(["python", "bench/run.py", *_public(argv)]) + "`.",
        "",
        "Workload W is what a user computes by hand from the store: per gpu×step K3 and count; per "
        "probability bin × turn kind count, mean r, mean |r| and sum r²; per turn kind the Pearson "
        "correlation of the per-sequence rollout and trainer log-ppl (definitions in "
        "`bench/wcommon.py`). The report computes all of W and much more: every metric of "
        "docs/metrics.md for the whole run, per bin, turn, turn kind, step, gpu and gpu×step, "
        "plus the hardware table and the curves. The floor reads and decodes only W's columns of "
        "every part with pyarrow (2 workers, as the report), and does nothing else. A user "
        "without mismatchctl computes W over the raw dumps instead (`*-raw`): the sequence "
        "layout's lists unnested to one row per position, each model token's turn derived from "
        "the mask, the masked positions dropped, then W (the report's time does not include the "
        "ingest; the ingest's own rate is given under each table).",
        "",
        f"Each command runs in a fresh process (Python start-up included), {repeats} round(s), "
        "round-robin with the starting command rotated every round, after an untimed warm-up "
        "(the page cache holds the store). Wall time is the median (min–max over the rounds); "
        "peak RSS is the largest `ru_maxrss` over the rounds. *vs report* and *vs floor* divide "
        "the median wall by the report's and by the floor's. Before the numbers are kept, the "
        "pandas, DuckDB and Polars results must agree with each other (token counts exactly, "
        "the rest to 1e-6 relative) and with the report's own numbers.",
        "",
        "Machine: "
        + ", ".join(
            x
            for x in (
                f"{info['machine']}",
                info.get("cpu"),
                f"{info['cpus']} cores",
                f"{info['ram_gb']:.0f} GB RAM" if "ram_gb" in info else None,
                info["system"],
            )
            if x
        )
        + f"; Python {info['python']}, pyarrow {info['pyarrow']}, polars {info['polars']}, "
        f"duckdb {info['duckdb']}, pandas {info['pandas']}, numpy {info['numpy']}; "
        f"mismatchctl {info['mismatchctl']}"
        + (f" at {info['commit']}" if "commit" in info else "")
        + f" (sources sha1 {info['sources_sha1']})"
        + f"; {info['date']}; load average (1 min) {info['load_start']:.1f} at the start, "
        f"{info.get('load_end', info['load_start']):.1f} at the end.",
    ]
    end = info.get("end_state", {})
    if end and end.get("sources_sha1") != info["sources_sha1"]:
        lines += [
            "",
            "**The mismatchctl sources changed during this run** (sources sha1 "
            f"{info['sources_sha1']} at the start, {end['sources_sha1']} at the end, "
            f"{end.get('commit', '?')}): the numbers mix code states.",
        ]
    if note:
        lines += ["", note]
    lines += [
        "",
        "Commands (STORE holds the runs `bench` and `bench2`: the same dumps, `bench2` with the "
        "two sides swapped by `" + " ".join(SWAPPED) + "`, so that `compare` has a difference to "
        "estimate and pairs every sequence):",
        "",
        "```",
    ]
    lines += [f"{impl:10s} {shown_command(impl)}" for impl in IMPLS]
    lines += [
        "ingest     python -m mismatchctl ingest DUMPS --run bench -q --store STORE",
        "```",
    ]
    for res in results:
        lines += ["", *size_table(res)]
    lines += ["", *targets(results)]
    return "\n".join(lines)


def parse_sizes(text: str) -> list[float]:
    try:
        sizes = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise BenchError(f"--sizes: expected millions like 10,100 (found {text!r})") from None
    if not sizes or any(not math.isfinite(s) or s <= 0 for s in sizes):
        raise BenchError(f"--sizes: expected positive millions like 10,100 (found {text!r})")
    return sorted(sizes)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="20,100", help="millions of response positions")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (median)")
    parser.add_argument("--write", type=Path, help="replace this Markdown file's section")
    parser.add_argument("--workdir", type=Path, help="dumps, stores, logs, results.json")
    parser.add_argument("--keep", action="store_true", help="keep dumps and stores")
    parser.add_argument(
        "--pandas-max",
        type=float,
        default=100,
        help="largest size (millions) to run the pandas script at (it holds everything in RAM)",
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds per command")
    parser.add_argument("--note", default="", help="a sentence added to the section")
    args = parser.parse_args()
    sizes = parse_sizes(args.sizes)
    if args.repeats < 1:
        raise BenchError("--repeats must be at least 1")

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mismatchctl-bench-"))
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    info = machine()
    log(f"workdir {workdir}; {info['cpus']} cores, {info.get('ram_gb', 0):.0f} GB RAM")
    results: list[dict[str, Any]] = []
    raw = workdir / "results.json"
    for millions in sizes:
        results.append(run_size(millions, args, workdir))
        driver_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        doc = {"machine": info, "argv": sys.argv, "driver_rss_mb": driver_mb, "sizes": results}
        raw.write_text(json.dumps(doc, indent=1))
        if driver_mb > DRIVER_RSS_LIMIT_MB:
            log(
                f"warning: the driver's RSS reached {driver_mb:.0f} MB: children's peaks include it"
            )
    info["load_end"] = os.getloadavg()[0]
    info["end_state"] = code_state()
    if info["end_state"].get("sources_sha1") != info["sources_sha1"]:
        log("warning: the mismatchctl sources changed during the run")
    raw.write_text(json.dumps({**json.loads(raw.read_text()), "machine": info}, indent=1))
    body = section(results, info, sys.argv[1:], args.note)
    print(body)
    log(f"raw results in {raw}")
    if args.write:
        replace_section(args.write, SECTION, body.removeprefix(SECTION))
        log(f"wrote the section {SECTION!r} of {args.write}")


if __name__ == "__main__":
    main()
