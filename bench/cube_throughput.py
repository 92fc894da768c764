"""Throughput and size of the K3 cube (``stats/cube/cube.py``) against the report's kernel.

    python bench/cube_throughput.py --tokens 1e7

Synthetic tokens with realistic codes (responses of 50-4000 tokens in 1-4 turns, 12 probability
bins, 16 log2 KV-position bins, 8 turn-position bins; per sequence: step, gpu, length bin, order
block, two attributes and a tag) are fed, in slices of whole sequences like the engine's, to
``Cube.add`` and to the report's ``stats.turnruns.bin_cells`` (one thread each, kernels compiled
first). Prints tokens/s of both, then the state size of the cube for several step counts.
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np

from mismatchctl.stats.bins import LOG_EDGES, assign_bins
from mismatchctl.stats.cube.cube import N_FIELDS, Cube
from mismatchctl.stats.cube.spec import CubeSpec, Dim
from mismatchctl.stats.turnruns import bin_cells

SLICE_TOKENS = 262_144  # the engine's slice


def spec_for(steps: int, block_cap: int = 128) -> CubeSpec:
    return CubeSpec(
        token_dims=(
            Dim("turn", 4, ("0", "1", "2", "3+")),
            Dim("turn_kind", 2, ("first", "later"), function_of="turn"),
            Dim("bin", len(LOG_EDGES) - 1),
            Dim("kv_position", 16),
            Dim("turn_position", 8),
        ),
        seq_dims=(
            Dim("step", steps),
            Dim("gpu", 3, ("H20", "L20", "A100"), ordered=False),
            Dim("length", 8),
            Dim("order", 8),
            Dim("attr:a", 4, ordered=False),
            Dim("attr:b", 4, ordered=False),
            Dim("tag:c", 3, ordered=False),
        ),
        block_cap=block_cap,
    )


def tokens(n: int, steps: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(50, 4001, n // 2000 + 1)
    lengths = lengths[: np.searchsorted(np.cumsum(lengths), n) + 1]
    n_seq, total = len(lengths), int(lengths.sum())
    seq = np.repeat(np.arange(n_seq), lengths)
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    pos = np.arange(total) - starts[seq]
    cuts = np.sort(rng.random((n_seq, 3)), axis=1) * lengths[:, None]
    cuts[rng.random((n_seq, 3)) < 0.4] = np.inf  # 1-4 turns
    cuts = np.sort(cuts, axis=1)
    turn = (pos[:, None] >= cuts[seq]).sum(axis=1)
    turn_start = np.where(
        turn > 0, np.take_along_axis(cuts[seq], np.maximum(turn - 1, 0)[:, None], 1)[:, 0], 0
    )
    tpos = pos - np.ceil(np.where(turn > 0, turn_start, 0)).astype(np.int64)
    kv = pos + rng.integers(100, 2000, n_seq)[seq]
    lr = -rng.exponential(0.6, total) * (rng.random(total) < 0.7)
    lt = np.minimum(lr + rng.normal(0, 1, total) * 0.01 * (1 + np.sqrt(-lr)), 0.0)
    tok = np.column_stack([
        np.minimum(turn, 3), turn > 0, assign_bins(np.exp(lr), LOG_EDGES),
        np.minimum(np.log2(kv + 1).astype(np.int64), 15),
        np.minimum(np.log2(np.maximum(tpos, 0) + 1).astype(np.int64), 7),
    ]).astype(np.int16)  # fmt: skip
    seqc = np.column_stack([
        rng.integers(0, steps, n_seq), rng.integers(0, 3, n_seq),
        np.minimum(np.log2(lengths).astype(np.int64) - 5, 7), rng.integers(0, 8, n_seq),
        rng.integers(0, 4, n_seq), rng.integers(0, 4, n_seq), rng.integers(0, 3, n_seq),
    ])  # fmt: skip
    return {"lr": lr, "lt": lt, "seq": seq, "turn": turn.astype(np.int32), "tok": tok, "seqc": seqc}


def slices(n: int, seq: np.ndarray) -> list[slice]:
    """Slices of about SLICE_TOKENS tokens cut at sequence starts."""
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    cuts = starts[np.searchsorted(starts, np.arange(SLICE_TOKENS, n, SLICE_TOKENS))]
    bounds = np.unique(np.r_[0, cuts, n])
    return [slice(a, b) for a, b in itertools.pairwise(bounds)]


def time_cube(spec: CubeSpec, t: dict[str, np.ndarray]) -> float:
    cube = Cube(spec)
    begin = time.perf_counter()
    for s in slices(len(t["lr"]), t["seq"]):
        cube.add(t["lr"][s], t["lt"][s], t["seq"][s], t["tok"][s], t["seqc"])
    return time.perf_counter() - begin


def time_bin_cells(t: dict[str, np.ndarray]) -> float:
    begin = time.perf_counter()
    for s in slices(len(t["lr"]), t["seq"]):
        bin_cells(t["lr"][s], t["lt"][s], t["seq"][s], t["turn"][s], LOG_EDGES, with_hist=False)
    return time.perf_counter() - begin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=float, default=1e7)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    t = tokens(int(args.tokens), args.steps)
    n = len(t["lr"])
    spec = spec_for(args.steps)
    warm = tokens(20_000, args.steps, seed=1)
    time_cube(spec, warm)  # compile both kernels first
    time_bin_cells(warm)
    cube_s, cells_s = time_cube(spec, t), time_bin_cells(t)
    print(f"{n / 1e6:.1f}M tokens in {len(np.unique(t['seq']))} sequences, one thread")
    print("| kernel | seconds | M tokens/s | ns/token |\n| --- | ---: | ---: | ---: |")
    for name, secs in (("Cube.add", cube_s), ("bin_cells (report)", cells_s)):
        print(f"| {name} | {secs:.2f} | {n / secs / 1e6:.1f} | {secs / n * 1e9:.0f} |")
    print(
        "\n| steps | block cap | tables | cells | state MB |\n| ---: | ---: | ---: | ---: | ---: |"
    )
    for steps, cap in ((8, 128), (100, 128), (1000, 128), (1000, 64), (5000, 128)):
        s = spec_for(steps, cap)
        mb = s.n_cells * N_FIELDS * 8 / 1e6
        print(f"| {steps} | {cap} | {len(s.tables)} | {s.n_cells} | {mb:.1f} |")


if __name__ == "__main__":
    main()
