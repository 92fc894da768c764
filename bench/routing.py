"""MoE routes: ingest and report with and without them, on the same tokens.

    python bench/routing.py --tokens 2 --layers 24 --top-k 8 [--workdir DIR] [--repeats 3]

Writes three Parquet sequence dumps of ``--tokens`` millions of response positions (sequences of
256-2048 tokens, 5% tool tokens) that differ only in the routes columns (``rollout_routed_experts``
/ ``trainer_routed_experts``, ``--layers`` x ``--top-k`` per token, the trainer's side differing
from the engine's on 2% of the positions on one layer): none (``plain``), nested lists of int16
(``lists``), prime-rl's ``{data, shape, dtype}`` uint8 bytes (``bytes``). Then times in fresh
processes (wall, peak RSS; medians of ``--repeats``, after one untimed warm-up round) ``ingest``
of each dump into a store of its own and ``report --json`` of each run; and, in this process, the
reading of one routes column by pyarrow alone (what the nested-list encoding costs to decode).
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 20_000


def dumps(workdir: Path, tokens: int, layers: int, top_k: int, seed: int = 0) -> dict[str, Path]:
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

    def lists(values: np.ndarray) -> pa.Array:
        return pa.ListArray.from_arrays(pa.array(offsets), values)

    def routes(ids: np.ndarray) -> pa.Array:
        inner = pa.FixedSizeListArray.from_arrays(pa.array(ids.reshape(-1)), top_k)
        return lists(pa.FixedSizeListArray.from_arrays(inner, layers))

    base = {
        "rollout_log_probs": lists(pa.array(roll)),
        "old_log_probs": lists(pa.array(train)),
        "response_mask": lists(pa.array(mask)),
    }

    def blobs(ids: np.ndarray) -> pa.Array:
        u8 = ids.astype(np.uint8)
        return pa.array(
            [
                {"data": u8[a:b].tobytes(), "shape": [b - a, layers, top_k], "dtype": "uint8"}
                for a, b in itertools.pairwise(offsets)
            ]
        )

    paths = {name: workdir / f"{name}.parquet" for name in ("plain", "lists", "bytes")}
    pq.write_table(pa.table(base), paths["plain"])
    lists_ = {**base, "rollout_routed_experts": routes(experts)}
    pq.write_table(pa.table({**lists_, "trainer_routed_experts": routes(other)}), paths["lists"])
    prompt = {"prompt_length": pa.array(np.zeros(len(lengths), np.int64))}
    raw = {**base, **prompt, "rollout_routed_experts": blobs(experts)}
    pq.write_table(pa.table({**raw, "trainer_routed_experts": blobs(other)}), paths["bytes"])
    return paths


def timed(args: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mismatchctl", *args], env=env, cwd=ROOT, stdout=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"failed: {args}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=float, default=2.0, help="millions of response positions")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--generate", action="store_true", help="only write the dumps (internal)")
    opts = ap.parse_args()
    workdir = opts.workdir or Path(tempfile.mkdtemp(prefix="routing-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if opts.generate:
        dumps(workdir, int(opts.tokens * 1e6), opts.layers, opts.top_k)
        return
    # written by a process of its own: the timed ones start from a small parent (peak RSS)
    shape = ["--tokens", str(opts.tokens), "--layers", str(opts.layers)]
    shape += ["--top-k", str(opts.top_k), "--workdir", str(workdir), "--generate"]
    subprocess.run([sys.executable, __file__, *shape], check=True)
    paths = {name: workdir / f"{name}.parquet" for name in ("plain", "lists", "bytes")}
    results: dict[str, list[tuple[float, float]]] = {}
    for round_ in range(opts.repeats + 1):
        for name, dump in paths.items():
            store = workdir / f"store-{name}"
            shutil.rmtree(store, ignore_errors=True)
            ingest = timed(["ingest", str(dump), "--run", name, "--store", str(store), "-q"])
            report = timed(["report", name, "--store", str(store), "--json", "/dev/null", "-q"])
            if round_:
                results.setdefault(f"ingest {name}", []).append(ingest)
                results.setdefault(f"report {name}", []).append(report)
    n = int(opts.tokens * 1e6)
    print(f"{n:,} positions, {opts.layers} layers x top-{opts.top_k}; medians of {opts.repeats}")
    for key, runs in results.items():
        wall = statistics.median(w for w, _ in runs)
        rss = statistics.median(r for _, r in runs)
        rate = f"{n / wall / 1e6:.2f}M positions/s" if key.startswith("ingest") else ""
        print(f"{key:14s} {wall:7.2f} s  {rss:7.0f} MB  {rate}")
    for name in ("lists", "bytes"):
        start = time.perf_counter()
        pq.read_table(paths[name], columns=["rollout_routed_experts"])
        wall = time.perf_counter() - start
        print(f"pyarrow reading one routes column ({name}): {wall:.2f} s")


if __name__ == "__main__":
    main()
