"""Does `mismatchctl watch` keep up with a training job? A writer in this process writes one step
file (``DumpWriter``: temp file, then rename) every 1/RATE seconds into a fresh directory while
`mismatchctl watch DIR --json` runs in a subprocess (file events, or --poll); the lag of a step is
the time from its rename to its line on the watch's stdout.

    python bench/watch_lag.py [--rate 1] [--steps 60] [--rows 256] [--tokens 512]
                              [--poll SECONDS] [--no-explain] [--start N --warmup SECONDS]

``--start N``: a long job already at step N: steps 0..N-1 are written and ingested (``mismatchctl
ingest``, not timed) before the watch starts, which then follows steps N, N+1, ... (``--warmup``
seconds after it starts: it reads the run's history and checks the files it holds first).

Prints one JSON object: the lag's median, p90 and max in seconds, the lag of the first and last
tenth of the steps (a watch that falls behind shows a growing lag), and the tokens per step.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from mismatchctl.dump import DumpWriter


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rate", type=float, default=1.0, help="step files per second")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--rows", type=int, default=256, help="responses per step")
    p.add_argument("--tokens", type=int, default=512, help="positions per response")
    p.add_argument("--poll", type=float, default=None)
    p.add_argument("--no-explain", action="store_true")
    p.add_argument("--start", type=int, default=0, help="steps the job wrote before the watch")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds for the watch to start")
    return p.parse_args()


def step_file(
    directory: Path, step: int, args: argparse.Namespace, rng: np.random.Generator
) -> None:
    rollout = -rng.exponential(1.0, (args.rows, args.tokens))
    noise = 0.02 if step % 17 != 16 else 0.3  # an occasional spike: alerts and explain
    trainer = np.minimum(rollout + rng.normal(0, noise, rollout.shape), 0.0)
    mask = np.ones(rollout.shape, dtype=np.int8)
    with DumpWriter(directory, rank=0) as writer:
        writer.add(step, rollout, trainer, mask)


def write_steps(directory: Path, args: argparse.Namespace, written: dict[int, float]) -> None:
    rng = np.random.default_rng(1)
    start = time.monotonic()
    for k in range(args.steps):
        step_file(directory, args.start + k, args, rng)
        written[args.start + k] = time.monotonic()
        time.sleep(max(0.0, start + (k + 1) / args.rate - time.monotonic()))


def history(dumps: Path, store: Path, args: argparse.Namespace) -> float:
    """Steps 0..start-1 written and ingested as run ``bench``; the seconds the ingest took."""
    if not args.start:
        return 0.0
    rng = np.random.default_rng(0)
    for step in range(args.start):
        step_file(dumps, step, args, rng)
    begin = time.monotonic()
    subprocess.run([sys.executable, "-m", "mismatchctl", "ingest", str(dumps), "--run", "bench",
                    "--store", str(store), "-q"], check=True)  # fmt: skip
    return time.monotonic() - begin


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dumps, store = Path(tmp) / "dumps", Path(tmp) / "store"
        dumps.mkdir()
        ingest_s = history(dumps, store, args)
        cmd = [sys.executable, "-m", "mismatchctl", "watch", str(dumps), "--run", "bench",
               "--json", "--max-files", str(args.steps), "--store", str(store)]  # fmt: skip
        cmd += ["--poll", str(args.poll)] if args.poll else []
        cmd += ["--no-explain"] if args.no_explain else []
        watch = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        time.sleep(args.warmup)  # the watch's start (imports, the run's history, the kernel)
        written: dict[int, float] = {}
        writer = threading.Thread(target=write_steps, args=(dumps, args, written))
        writer.start()
        seen: dict[int, float] = {}
        assert watch.stdout is not None
        for line in watch.stdout:
            seen[json.loads(line)["step"]] = time.monotonic()
        writer.join()
        watch.wait()
    lags = np.array([seen[s] - written[s] for s in sorted(written) if s in seen])
    tenth = max(1, len(lags) // 10)
    print(json.dumps({
        "rate": args.rate, "steps": args.steps, "start": args.start, "seen": len(seen),
        "history_ingest_s": round(ingest_s, 1),
        "tokens_per_step": args.rows * args.tokens,
        "lag_median": round(float(np.median(lags)), 3),
        "lag_p90": round(float(np.percentile(lags, 90)), 3),
        "lag_max": round(float(lags.max()), 3),
        "lag_first_tenth": round(float(np.median(lags[:tenth])), 3),
        "lag_last_tenth": round(float(np.median(lags[-tenth:])), 3),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
