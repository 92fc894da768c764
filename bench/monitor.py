"""What the Monitor costs a training step, against writing a dump and ingesting it.

Each step is ``--rows`` responses of ``--width`` positions (torch float32 tensors on the CPU,
right-padded, 1M model tokens by default), given to ``Monitor.update`` in ``--micro`` calls
(micro-batches), then ``flush()``; the same tensors are then written with ``DumpWriter`` (one
file per step) and ingested with ``mismatchctl ingest``'s api, one file at a time, as ``watch``
ingests them. Timed per step: ``update`` (the device reductions and the device copy of the
inputs), ``step_summary``, ``flush`` (the host copy and the store's transaction; ``--no-explain``
keeps an alert's localization out of it), ``DumpWriter.add`` + its flush, the ingest, and the
report of the step that gives the dump path the numbers ``step_summary`` gives.

    python bench/monitor.py [--steps 5] [--rows 1024] [--width 1024] [--micro 4] [--threads N]

Prints one JSON object: medians per step in seconds over the steps after the first (which
loads numba's kernels and warms torch).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from mismatchctl import DumpWriter, Monitor, api


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rows", type=int, default=1024, help="responses per step")
    p.add_argument("--width", type=int, default=1024, help="positions per response (padded)")
    p.add_argument("--micro", type=int, default=4, help="update calls per step")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    return p.parse_args()


def step_tensors(rng: np.random.Generator, rows: int, width: int) -> tuple[torch.Tensor, ...]:
    """float32 logprobs of both sides and a response mask: every position a model token but a
    tool response in every other row (two turns) and the right padding of a few rows."""
    lt = -rng.exponential(0.5, (rows, width)).astype(np.float32)
    lr = np.minimum(lt + rng.normal(0, 0.03, (rows, width)).astype(np.float32), 0)
    mask = np.ones((rows, width), np.int64)
    mask[1::2, width // 3 : width // 3 + 16] = 0
    mask[::8, width - 64 :] = 0
    return torch.from_numpy(lr), torch.from_numpy(lt), torch.from_numpy(mask)


class Clock:
    """Seconds per step of each part, by name."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.times: dict[str, list[float]] = {k: [] for k in keys}
        self._start = 0.0

    def start(self) -> None:
        self._start = time.perf_counter()

    def lap(self, key: str) -> None:
        now = time.perf_counter()
        self.times[key].append(now - self._start)
        self._start = now


KEYS = ("update", "summary", "flush", "dump_write", "ingest", "report_step")


def one_step(
    step: int, parts: list, mon: Monitor, writer: DumpWriter, root: Path, clock: Clock
) -> None:
    clock.start()
    for p in parts:
        mon.update(step, *p)
    clock.lap("update")
    mon.step_summary()
    clock.lap("summary")
    mon.flush()
    clock.lap("flush")
    for p in parts:
        writer.add(step, *p)
    path = writer.flush()
    clock.lap("dump_write")
    api.ingest([path], "bench", store=root / "dump-store")
    clock.lap("ingest")
    # what the dump path needs for the step's numbers (watch's line reads the same)
    api.report([f"bench@steps={step}..{step}"], store=root / "dump-store", by=["step"])
    clock.lap("report_step")


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    clock = Clock(KEYS)
    tokens = 0
    with tempfile.TemporaryDirectory(prefix="mismatchctl-bench-monitor-") as tmp:
        root = Path(tmp)
        mon = Monitor("bench", root / "monitor-store", explain=False)
        writer = DumpWriter(root / "dumps")
        for step in range(args.steps):
            lr, lt, mask = step_tensors(rng, args.rows, args.width)
            tokens = int(mask.sum())
            parts = list(zip(*(x.chunk(args.micro) for x in (lr, lt, mask)), strict=True))
            one_step(step, parts, mon, writer, root, clock)
    med = {k: statistics.median(v[1:] or v) for k, v in clock.times.items()}
    monitor = med["update"] + med["summary"] + med["flush"]
    dump = med["dump_write"] + med["ingest"] + med["report_step"]
    out = {
        "tokens_per_step": tokens,
        "micro_batches": args.micro,
        "torch_threads": torch.get_num_threads(),
        **{f"{k}_s": round(v, 4) for k, v in med.items()},
        "monitor_total_s": round(monitor, 4),
        "dump_ingest_report_s": round(dump, 4),
        "monitor_over_dump": round(monitor / dump, 3),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
