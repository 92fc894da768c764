"""MoE routes: ingest and report with and without them, on the same tokens, and an earlier
revision's ingest beside this one's, in one run:

    python bench/routing.py --tokens 2 --layers 24 --top-k 8 [--repeats 3] [--before REV]
        [--dumps plain,fixed,...] [--write docs/benchmarks.md] [--workdir DIR]
    python bench/routing.py --workdir DIR --render [--write docs/benchmarks.md]  # from its JSON

Writes dumps of ``--tokens`` millions of response positions (sequences of 256-2048 tokens, 5%
tool tokens) that differ only in the routes (``--layers`` x ``--top-k`` per token, the trainer's
side differing from the engine's on 2% of the positions on one layer; reused when the workdir
holds them):

    plain       Parquet, no routes
    fixed       nested fixed-size lists of int16 (list<fixed_size_list<fixed_size_list<int16>>>)
    lists       nested lists of int64, what pyarrow makes of ``ndarray.tolist()`` (list<list<list>>)
    bytes       prime-rl's ``{data, shape, dtype}`` structs of uint8 bytes
    plainproto  verl ``DataProto.save_to_disk`` pickles (numpy serialization), 8 steps, no routes
    dataproto   the same with ``routed_experts`` / ``trainer_routed_experts`` int16 tensors
                ``[rows, response width, layers, top_k]`` (0 at the padded positions)

(``rollout_routed_experts`` / ``trainer_routed_experts`` in the Parquet dumps). Then times,
alternating round-robin for ``--repeats`` rounds after one untimed warm-up round (numba's cache,
the page cache), each command in a fresh process measured with wait4 (wall, CPU = user + system,
peak RSS): ``ingest`` of each dump (``--dumps``: which) into a store of its own with this
checkout and, with ``--before REV``, with the code of REV (a git worktree); the second of two
ingests in one process (its own wall and CPU: the throughput without the start-up); ``report
--json`` of the ``plain`` run and the first routed one; and the decode floor: pyarrow alone
reading the two routes columns of a Parquet dump in the batches the reader uses, or the
DataProto files unpickled. Prints the results (medians, min-max, rates per model token, what the
routes add to the same ingest without them) and, with ``--write``, replaces the section "## MoE
routes: ingest before and after" of that Markdown file; the raw numbers go to the workdir's
routing.json (``--render`` writes the section again from it).
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
DUMPS = ("plain", "fixed", "lists", "bytes", "plainproto", "dataproto")
ROUTED = ("fixed", "lists", "bytes", "dataproto")
BASE = {"fixed": "plain", "lists": "plain", "bytes": "plain", "dataproto": "plainproto"}
STEPS = 8  # files of the verl DataProto dump
ROUTE_KEYS = ("routed_experts", "trainer_routed_experts")


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
    (workdir / "model-tokens").write_text(str(int(mask.sum())))
    pq.write_table(pa.table(base), workdir / "plain.parquet")
    for name, encode in (("fixed", fixed), ("lists", nested)):
        cols = {"rollout_routed_experts": encode(experts), "trainer_routed_experts": encode(other)}
        pq.write_table(pa.table({**base, **cols}), workdir / f"{name}.parquet")
    prompt = {"prompt_length": pa.array(np.zeros(len(lengths), np.int64))}
    raw = {**base, **prompt, "rollout_routed_experts": blobs(experts)}
    pq.write_table(
        pa.table({**raw, "trainer_routed_experts": blobs(other)}), workdir / "bytes.parquet"
    )
    dataproto(workdir / "dataproto", lengths, (roll, train, mask), (experts, other))
    dataproto(workdir / "plainproto", lengths, (roll, train, mask), None)


def dataproto(
    out: Path, lengths: list[int], sides: tuple[Any, Any, Any], routes: tuple[Any, Any] | None
) -> None:
    """verl's trainer batch saved by ``DataProto.save_to_disk`` (numpy serialization), one file
    per step of ``STEPS``: right-padded ``[rows, width]`` logprobs and mask, both sides' routes
    ``[rows, width, layers, top_k]`` int16 (verl's dtype) as wide as the response (no prompt
    part), 0 at the padded positions as verl leaves them; ``routes`` None: the same batch
    without them."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from tests.dataproto import uids, write_dataproto

    out.mkdir(exist_ok=True)
    starts = np.r_[0, np.cumsum(lengths)]
    cut = np.linspace(0, len(lengths), STEPS + 1).astype(int)
    for step, (a, b) in enumerate(itertools.pairwise(cut)):
        width = max(lengths[a:b])
        batch = {
            "rollout_log_probs": np.zeros((b - a, width), np.float32),
            "old_log_probs": np.zeros((b - a, width), np.float32),
            "response_mask": np.zeros((b - a, width), np.int64),
        }
        if routes is not None:
            shape = (b - a, width, *routes[0].shape[1:])
            batch |= {k: np.zeros(shape, np.int16) for k in ROUTE_KEYS}
        for i in range(a, b):
            lo, hi = starts[i], starts[i + 1]
            for key, values in zip(batch, (*sides, *(routes or ())), strict=True):
                batch[key][i - a, : hi - lo] = values[lo:hi]
        write_dataproto(out / f"step_{step}.pkl", batch, {"uid": uids(b - a)})


def floor(path: Path) -> None:
    """Decode the two sides' routes as the reader does: the Parquet columns in its batches and
    through its read buffer; a DataProto directory's files unpickled (numpy arrays, torch)."""
    import pyarrow.parquet as pq

    sys.path.insert(0, str(ROOT))
    from mismatchctl.ingest import parquet_sequence
    from mismatchctl.ingest import source as ingest_source

    if path.is_dir():
        from mismatchctl.ingest.verl_dataproto import load_dataproto

        for file in sorted(path.glob("*.pkl")):
            load_dataproto(file)
        return
    pf = pq.ParquetFile(path, buffer_size=parquet_sequence.ROUTES_READ_BUFFER, pre_buffer=False)
    columns = ["rollout_routed_experts", "trainer_routed_experts"]
    avg = pf.metadata.num_rows and parquet_sequence._avg_len(pf, "rollout_log_probs", str(path))
    rows = max(
        1,
        min(65536, ingest_source.BATCH_TOKENS // max(1, avg)) // ingest_source.ROUTES_BATCH_DIVISOR,
    )
    for _ in pf.iter_batches(batch_size=rows, columns=columns):
        pass


def warm(tree: Path, args: list[str]) -> None:
    """Ingest twice in this process (``args``: the dump's inputs, its store); print the second
    ingest's wall and CPU seconds as JSON: the throughput without the process's start-up
    (imports, numba's kernels, first-touch memory)."""
    sys.path.insert(0, str(tree))
    from mismatchctl import api

    inputs, store = args[:-1], Path(args[-1])
    for _ in range(2):
        shutil.rmtree(store, ignore_errors=True)
        start, cpu = time.perf_counter(), time.process_time()
        api.ingest(inputs, "warm", store=store, trust_pickle=True)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    shutil.rmtree(store, ignore_errors=True)
    print(json.dumps({"wall": wall, "cpu": cpu}))


def dump_path(workdir: Path, name: str) -> Path:
    return workdir / (name if name.endswith("proto") else f"{name}.parquet")


def dump_args(workdir: Path, name: str) -> list[str]:
    """The ingest's inputs: a Parquet file, or a DataProto dump's step files."""
    path = dump_path(workdir, name)
    if path.is_dir():
        return [*map(str, sorted(path.glob("*.pkl"))), "--trust-pickle"]
    return [str(path)]


def mctl(tree: Path, *args: str) -> list[str]:
    """The CLI of the checkout ``tree`` (its package first on the path)."""
    code = (
        f"import runpy, sys; sys.path.insert(0, {str(tree)!r}); sys.argv[0] = 'mismatchctl'; "
        "runpy.run_module('mismatchctl', run_name='__main__', alter_sys=True)"
    )
    return [sys.executable, "-c", code, *args]


def timed(cmd: list[str]) -> dict[str, float]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (MB) of one fresh process (an
    ingest's store removed first, untimed); a ``--warm`` process's own figures (its JSON)."""
    if "ingest" in cmd:
        shutil.rmtree(cmd[cmd.index("--store") + 1], ignore_errors=True)
    start = time.perf_counter()
    out = subprocess.PIPE if "--warm" in cmd else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out)
    text = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"failed: {cmd}")
    cpu = usage.ru_utime + usage.ru_stime
    got = {"wall": wall, "cpu": cpu, "rss_mb": usage.ru_maxrss / 1024}
    return got | json.loads(text) if text else got


def commands(workdir: Path, trees: dict[str, Path], dumps: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    routed = [n for n in dumps if n in ROUTED]
    for label, tree in trees.items():
        for name in dumps if label == "now" else routed:
            store = workdir / f"store-{label}-{name}"
            out[f"ingest {name} @{label}"] = mctl(
                tree, "ingest", *dump_args(workdir, name), "--run", name, "--store", str(store),
                "-q",
            )  # fmt: skip
    if "plain" in dumps and routed:
        for name in ("plain", routed[0]):
            store = str(workdir / f"store-now-{name}")
            out[f"report {name}"] = mctl(
                ROOT, "report", name, "--store", store, "--json", "/dev/null", "-q"
            )
    for name in routed:
        out[f"floor {name}"] = [sys.executable, __file__, "--floor", str(dump_path(workdir, name))]
    for name in dumps:
        store = str(workdir / f"store-warm-{name}")
        inputs = [a for a in dump_args(workdir, name) if a != "--trust-pickle"]
        out[f"warm {name}"] = [sys.executable, __file__, "--warm", *inputs, store]
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


LABELS = {
    "plain": "no routes (Parquet)",
    "fixed": "fixed-size lists (int16)",
    "lists": "nested lists (int64)",
    "bytes": "prime-rl bytes (uint8)",
    "plainproto": "no routes (verl DataProto)",
    "dataproto": "verl DataProto (int16)",
}


def section(result: dict[str, Any]) -> str:
    got, n, model = result["runs"], result["tokens"], result["model_tokens"]
    before, dumps = result["before"], result["dumps"]
    rows = [
        "| dump | command | wall s: median (min-max) | CPU s: median | peak RSS MB | "
        "M model tokens/s: wall | M model tokens per CPU s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in dumps:
        keys = [(f"ingest {name} @now", "`ingest` (this checkout)")]
        if before and name in ROUTED:
            keys.append((f"ingest {name} @before", f"`ingest` at {before}"))
        keys.append((f"warm {name}", "`ingest`, the second in one process"))
        if name in ROUTED:
            what = (
                "unpickling the files" if name.endswith("proto") else "pyarrow decoding the routes"
            )
            keys.append((f"floor {name}", what))
        for key, what in keys:
            wall, lo, hi = _stat(got[key], "wall")
            cpu = _stat(got[key], "cpu")[0]
            rss = f"{max(m['rss_mb'] for m in got[key]):,.0f}" if key[:4] != "warm" else ""
            rate = f"{model / wall / 1e6:.2f}" if key[:5] != "floor" else ""
            rows.append(
                f"| {LABELS[name]} | {what} | {wall:.2f} ({lo:.2f}-{hi:.2f}) | {cpu:.2f} | "
                f"{rss} | {rate} | {model / cpu / 1e6:.2f} |"
            )
    added = []
    for name in dumps:
        base = BASE.get(name)
        if base not in dumps:
            continue
        fresh = [
            _stat(got[f"ingest {x} @now"], k)[0] for k in ("wall", "cpu") for x in (name, base)
        ]
        warmed = [_stat(got[f"warm {x}"], k)[0] for k in ("wall", "cpu") for x in (name, base)]
        wall, cpu = fresh[0] - fresh[1], fresh[2] - fresh[3]
        w_wall, w_cpu = warmed[0] - warmed[1], warmed[2] - warmed[3]
        added.append(
            f"| {LABELS[name]} | {wall:.2f} / {cpu:.2f} | {w_wall:.2f} / {w_cpu:.2f} | "
            f"{model / max(w_wall, 1e-9) / 1e6:.2f} | {model / max(w_cpu, 1e-9) / 1e6:.2f} |"
        )
    head = (
        f"`python bench/routing.py --tokens {n / 1e6:g} --layers {result['layers']} --top-k "
        f"{result['top_k']} --repeats {result['repeats']} --dumps {','.join(dumps)}"
        f"{' --before ' + before if before else ''}`: {n:,} response positions, {model:,} of "
        "them model tokens (sequences of 256-2048 tokens, 5% tool tokens, the trainer's routes "
        "differing on 2% of the positions); every command in a fresh process, "
        f"{result['repeats']} alternating rounds after a warm-up round; {os.cpu_count()} cores "
        f"shared with other jobs (load average {result['load_before']} before, "
        f"{result['load_after']} after)."
    )
    table = [
        "What the routes add to the same ingest without them (wall / CPU seconds, medians), in a "
        "fresh process and in the second ingest of one process, and the rate of the routes "
        "alone in the latter:",
        "| dump | fresh process: s added | second ingest: s added | M model tokens/s | M model "
        "tokens per CPU s |\n| --- | ---: | ---: | ---: | ---: |\n" + "\n".join(added),
    ]
    reports = []
    if "report plain" in got:
        other = next(k for k in got if k.startswith("report ") and k != "report plain")
        reports.append(
            f"`report --json` of the same tokens: {_stat(got['report plain'], 'wall')[0]:.2f} s "
            f"without routes, {_stat(got[other], 'wall')[0]:.2f} s with them ({other[7:]}; "
            f"medians; peak RSS {max(m['rss_mb'] for m in got['report plain']):,.0f} / "
            f"{max(m['rss_mb'] for m in got[other]):,.0f} MB)."
        )
    return "\n\n".join([head, "\n".join(rows), *(table if added else []), *reports])


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
    ap.add_argument("--dumps", default=",".join(DUMPS), help=f"of {', '.join(DUMPS)}")
    ap.add_argument("--warm", nargs="+", help="ingest twice in one process (internal)")
    opts = ap.parse_args()
    if opts.floor:
        floor(opts.floor)
        return
    if opts.warm:
        warm(ROOT, opts.warm)
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
    chosen = [d for d in DUMPS if d in opts.dumps.split(",")]
    runs = rounds(commands(workdir, trees, chosen), opts.repeats)
    result = {
        **want, "repeats": opts.repeats, "before": before, "runs": runs, "dumps": chosen,
        "model_tokens": int((workdir / "model-tokens").read_text()),
        "load_before": load_before, "load_after": " / ".join(f"{x:.1f}" for x in os.getloadavg()),
    }  # fmt: skip
    (workdir / "routing.json").write_text(json.dumps(result, indent=1) + "\n")
    output(result, opts.write)
    if opts.before:
        subprocess.run(["git", "worktree", "remove", "--force", str(trees["before"])], cwd=ROOT,
                       check=False)  # fmt: skip


if __name__ == "__main__":
    main()
