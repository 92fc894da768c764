"""MoE routes: ingest and report with and without them, on the same tokens, and an earlier
revision's ingest beside this one's, in one run:

    python bench/routing.py --tokens 2 --layers 24 --top-k 8 [--repeats 3] [--before REV]
        [--write docs/benchmarks.md] [--workdir DIR]
    python bench/routing.py --workdir DIR --render [--write docs/benchmarks.md]  # from its JSON

Writes Parquet sequence dumps of ``--tokens`` millions of response positions (sequences of
256-2048 tokens, 5% tool tokens) that differ only in the routes columns (``rollout_routed_experts``
/ ``trainer_routed_experts``, ``--layers`` x ``--top-k`` per token, the trainer's side differing
from the engine's on 2% of the positions on one layer; reused when the workdir holds them):

    plain   no routes
    fixed   nested fixed-size lists of int16 (list<fixed_size_list<fixed_size_list<int16>>>)
    lists   nested lists of int64, what pyarrow makes of ``ndarray.tolist()`` (list<list<list>>)
    bytes   prime-rl's ``{data, shape, dtype}`` structs of uint8 bytes

Then times, alternating round-robin for ``--repeats`` rounds after one untimed warm-up round
(numba's cache, the page cache), each command in a fresh process measured with wait4 (wall, CPU
= user + system, peak RSS): ``ingest`` of each dump into a store of its own with this checkout
and, with ``--before REV``, with the code of REV (a git worktree); ``report --json`` of the
``plain`` and ``lists`` runs; and the decode floor: pyarrow alone reading the two routes columns
of a dump in the batches the reader uses. Prints the results (medians, min-max) and, with
``--write``, replaces the section "## MoE routes: ingest before and after" of that Markdown file;
the raw numbers go to the workdir's routing.json (``--render`` writes the section again from it).
"""

from __future__ import annotations

import argparse
import itertools
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

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
from sections import replace_section  # noqa: E402

SECTION = "## MoE routes: ingest before and after"
CHUNK = 20_000
DUMPS = ("plain", "fixed", "lists", "bytes")
ROUTED = DUMPS[1:]


def dumps(workdir: Path, tokens: int, layers: int, top_k: int, seed: int = 0) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    lengths = []
    while sum(lengths) < tokens:
        lengths.append(int(rng.integers(256, 2049)))
    lengths[-1] -= sum(lengths) - tokens
    n = int(sum(lengths))
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    roll = -rng.exponential(0.3, n)
    train = np.minimum(roll + rng.normal(0, 0.02, n), 0)
    mask = (rng.random(n) > 0.05).astype(np.int8)
    ranked = np.concatenate(  # a chunk at a time: the random keys are 64 floats a layer
        [
            np.argsort(rng.random((min(CHUNK, n - a), layers, 64)), axis=2)[
                :, :, : top_k + 1
            ].astype(np.int16)
            for a in range(0, n, CHUNK)
        ]
    )
    experts = np.ascontiguousarray(ranked[:, :, :top_k])
    other = experts.copy()
    flip = rng.random(n) < 0.02
    other[flip, 0, 0] = ranked[flip, 0, top_k]  # the next expert: one differing id on layer 0

    def lists(values: pa.Array) -> pa.Array:
        return pa.ListArray.from_arrays(pa.array(offsets), values)

    def fixed(ids: np.ndarray) -> pa.Array:
        inner = pa.FixedSizeListArray.from_arrays(pa.array(ids.reshape(-1)), top_k)
        return lists(pa.FixedSizeListArray.from_arrays(inner, layers))

    def nested(ids: np.ndarray) -> pa.Array:  # as pa.array(ids.tolist()) types it
        inner = pa.ListArray.from_arrays(
            pa.array(np.arange(0, n * layers + 1, dtype=np.int32) * top_k),
            pa.array(ids.reshape(-1).astype(np.int64)),
        )
        middle = pa.ListArray.from_arrays(
            pa.array(np.arange(0, n + 1, dtype=np.int32) * layers), inner
        )
        return lists(middle)

    def blobs(ids: np.ndarray) -> pa.Array:
        u8 = ids.astype(np.uint8)
        return pa.array(
            [
                {"data": u8[a:b].tobytes(), "shape": [b - a, layers, top_k], "dtype": "uint8"}
                for a, b in itertools.pairwise(offsets)
            ]
        )

    base = {
        "rollout_log_probs": lists(pa.array(roll)),
        "old_log_probs": lists(pa.array(train)),
        "response_mask": lists(pa.array(mask)),
    }
    pq.write_table(pa.table(base), workdir / "plain.parquet")
    for name, encode in (("fixed", fixed), ("lists", nested)):
        cols = {"rollout_routed_experts": encode(experts), "trainer_routed_experts": encode(other)}
        pq.write_table(pa.table({**base, **cols}), workdir / f"{name}.parquet")
    prompt = {"prompt_length": pa.array(np.zeros(len(lengths), np.int64))}
    raw = {**base, **prompt, "rollout_routed_experts": blobs(experts)}
    pq.write_table(
        pa.table({**raw, "trainer_routed_experts": blobs(other)}), workdir / "bytes.parquet"
    )


def floor(path: Path) -> None:
    """Decode the two routes columns as the reader does (its batches, its read buffer)."""
    import pyarrow.parquet as pq

    sys.path.insert(0, str(ROOT))
    from mismatchctl.ingest import parquet_sequence as ps
    from mismatchctl.ingest import source as src

    pf = pq.ParquetFile(path, buffer_size=ps.ROUTES_READ_BUFFER, pre_buffer=False)
    columns = ["rollout_routed_experts", "trainer_routed_experts"]
    avg = pf.metadata.num_rows and ps._avg_len(pf, "rollout_log_probs", str(path))
    rows = max(1, min(65536, src.BATCH_TOKENS // max(1, avg)) // src.ROUTES_BATCH_DIVISOR)
    for _ in pf.iter_batches(batch_size=rows, columns=columns):
        pass


def mctl(tree: Path, *args: str) -> list[str]:
    """The CLI of the checkout ``tree`` (its package first on the path)."""
    code = (
        f"import runpy, sys; sys.path.insert(0, {str(tree)!r}); sys.argv[0] = 'mismatchctl'; "
        "runpy.run_module('mismatchctl', run_name='__main__', alter_sys=True)"
    )
    return [sys.executable, "-c", code, *args]


def timed(cmd: list[str]) -> dict[str, float]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (MB) of one fresh process (an
    ingest's store removed first, untimed)."""
    if "ingest" in cmd:
        shutil.rmtree(cmd[cmd.index("--store") + 1], ignore_errors=True)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"failed: {cmd}")
    cpu = usage.ru_utime + usage.ru_stime
    return {"wall": wall, "cpu": cpu, "rss_mb": usage.ru_maxrss / 1024}


def commands(workdir: Path, trees: dict[str, Path]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for label, tree in trees.items():
        for name in DUMPS if label == "now" else ROUTED:
            store = workdir / f"store-{label}-{name}"
            dump = str(workdir / f"{name}.parquet")
            out[f"ingest {name} @{label}"] = mctl(
                tree, "ingest", dump, "--run", name, "--store", str(store), "-q"
            )
    for name in ("plain", "lists"):
        store = str(workdir / f"store-now-{name}")
        out[f"report {name}"] = mctl(
            ROOT, "report", name, "--store", store, "--json", "/dev/null", "-q"
        )
    for name in ROUTED:
        out[f"floor {name}"] = [
            sys.executable,
            __file__,
            "--floor",
            str(workdir / f"{name}.parquet"),
        ]
    return out


def rounds(cmds: dict[str, list[str]], repeats: int) -> dict[str, list[dict[str, float]]]:
    names = list(cmds)
    for name in names:  # warm-up: numba's cache, the page cache; the stores the reports read
        timed(cmds[name])
    got: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            got[name].append(timed(cmds[name]))
            m = got[name][-1]
            print(
                f"round {r + 1}: {name}: {m['wall']:.2f} s, {m['cpu']:.2f} s CPU", file=sys.stderr
            )
    return got


def _stat(runs: list[dict[str, float]], key: str) -> tuple[float, float, float]:
    values = sorted(m[key] for m in runs)
    return statistics.median(values), values[0], values[-1]


def section(result: dict[str, Any]) -> str:
    got, n = result["runs"], result["tokens"]
    before = result["before"]
    labels = {"plain": "no routes", "fixed": "fixed-size lists (int16)"}
    labels |= {"lists": "nested lists (int64)", "bytes": "prime-rl bytes (uint8)"}
    rows = [
        "| dump | command | wall s: median (min-max) | CPU s: median | peak RSS MB | "
        "M tokens/s: wall | M tokens per CPU s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in DUMPS:
        keys = [(f"ingest {name} @now", "`ingest` (this checkout)")]
        if before and name in ROUTED:
            keys.append((f"ingest {name} @before", f"`ingest` at {before}"))
        if name in ROUTED:
            keys.append((f"floor {name}", "pyarrow decoding the two routes columns"))
        for key, what in keys:
            wall, lo, hi = _stat(got[key], "wall")
            cpu = _stat(got[key], "cpu")[0]
            rss = max(m["rss_mb"] for m in got[key])
            rate = f"{n / wall / 1e6:.2f}" if key.startswith("ingest") else ""
            rows.append(
                f"| {labels[name]} | {what} | {wall:.2f} ({lo:.2f}-{hi:.2f}) | {cpu:.2f} | "
                f"{rss:,.0f} | {rate} | {n / cpu / 1e6:.2f} |"
            )
    plain = _stat(got["ingest plain @now"], "wall")[0]
    marginal = [
        f"{name}: {n / max(1e-9, _stat(got[f'ingest {name} @now'], 'wall')[0] - plain) / 1e6:.2f}M"
        for name in ROUTED
    ]
    reports = [
        f"`report --json` of the same tokens: {_stat(got['report plain'], 'wall')[0]:.2f} s "
        f"without routes, {_stat(got['report lists'], 'wall')[0]:.2f} s with them (medians; "
        f"peak RSS {max(m['rss_mb'] for m in got['report plain']):,.0f} / "
        f"{max(m['rss_mb'] for m in got['report lists']):,.0f} MB)."
    ]
    head = (
        f"`python bench/routing.py --tokens {n / 1e6:g} --layers {result['layers']} --top-k "
        f"{result['top_k']} --repeats {result['repeats']}"
        f"{' --before ' + before if before else ''}`: {n:,} response positions (sequences of "
        "256-2048 tokens, 5% tool tokens, the trainer's routes differing on 2% of the positions); "
        f"every command in a fresh process, {result['repeats']} alternating rounds after a warm-up "
        f"round; {os.cpu_count()} cores shared with other jobs (load average "
        f"{result['load_before']} before, {result['load_after']} after)."
    )
    tail = (
        "Routes alone, beside the same ingest without them (tokens / (wall with routes - wall "
        f"without), this checkout): {', '.join(marginal)} tokens/s."
    )
    return "\n\n".join([head, "\n".join(rows), tail, *reports])


def output(result: dict[str, Any], write: Path | None) -> None:
    text = section(result)
    print(text)
    if write:
        replace_section(write, SECTION, text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=float, default=2.0, help="millions of response positions")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before", help="a git revision whose ingest is timed beside this one's")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--write", type=Path, help="replace this Markdown file's section")
    ap.add_argument("--generate", action="store_true", help="only write the dumps (internal)")
    ap.add_argument("--floor", type=Path, help="only decode this dump's routes (internal)")
    ap.add_argument("--render", action="store_true", help="the section from the workdir's JSON")
    opts = ap.parse_args()
    if opts.floor:
        floor(opts.floor)
        return
    if opts.render:
        output(json.loads((opts.workdir / "routing.json").read_text()), opts.write)
        return
    workdir = opts.workdir or Path(tempfile.mkdtemp(prefix="routing-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    n = int(opts.tokens * 1e6)
    if opts.generate:
        dumps(workdir, n, opts.layers, opts.top_k)
        return
    marker = workdir / "routing-dumps.json"
    want = {"tokens": n, "layers": opts.layers, "top_k": opts.top_k}
    if not marker.exists() or json.loads(marker.read_text()) != want:
        # written by a process of its own: the timed ones start from a small parent (peak RSS)
        shape = ["--tokens", str(opts.tokens), "--layers", str(opts.layers)]
        shape += ["--top-k", str(opts.top_k), "--workdir", str(workdir), "--generate"]
        subprocess.run([sys.executable, __file__, *shape], check=True)
        marker.write_text(json.dumps(want))
    trees = {"now": ROOT}
    before = None
    if opts.before:  # named by its commit: a branch name moves
        before = subprocess.run(
            ["git", "rev-parse", "--short", opts.before], cwd=ROOT, check=True,
            capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        tree = workdir / f"tree-{before}"
        if not tree.exists():
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), before],
                           cwd=ROOT, check=True, capture_output=True)  # fmt: skip
        trees["before"] = tree
    load_before = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    runs = rounds(commands(workdir, trees), opts.repeats)
    result = {
        **want, "repeats": opts.repeats, "before": before, "runs": runs,
        "load_before": load_before, "load_after": " / ".join(f"{x:.1f}" for x in os.getloadavg()),
    }  # fmt: skip
    (workdir / "routing.json").write_text(json.dumps(result, indent=1) + "\n")
    output(result, opts.write)
    if opts.before:
        subprocess.run(["git", "worktree", "remove", "--force", str(trees["before"])], cwd=ROOT,
                       check=False)  # fmt: skip


if __name__ == "__main__":
    main()
