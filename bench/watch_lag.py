"""Does `mismatchctl watch` keep up with a training job? A writer in this process writes one step
file (``DumpWriter``: temp file, then rename) every 1/RATE seconds into a fresh directory while
`mismatchctl watch DIR --json` runs in a subprocess (file events, or --poll); the lag of a step is
the time from its rename to its line on the watch's stdout.

    python bench/watch_lag.py [--rate 1] [--steps 60] [--rows 256] [--tokens 512]
                              [--poll SECONDS] [--no-explain]

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
    return p.parse_args()


def write_steps(directory: Path, args: argparse.Namespace, written: dict[int, float]) -> None:
    rng = np.random.default_rng(0)
    start = time.monotonic()
    for step in range(args.steps):
        rollout = -rng.exponential(1.0, (args.rows, args.tokens))
        noise = 0.02 if step % 17 != 16 else 0.3  # an occasional spike: alerts and explain
        trainer = np.minimum(rollout + rng.normal(0, noise, rollout.shape), 0.0)
        mask = np.ones(rollout.shape, dtype=np.int8)
        with DumpWriter(directory, rank=0) as writer:
            writer.add(step, rollout, trainer, mask)
        written[step] = time.monotonic()
        time.sleep(max(0.0, start + (step + 1) / args.rate - time.monotonic()))


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dumps, store = Path(tmp) / "dumps", Path(tmp) / "store"
        dumps.mkdir()
        cmd = [sys.executable, "-m", "mismatchctl", "watch", str(dumps), "--run", "bench",
               "--json", "--max-files", str(args.steps), "--store", str(store)]  # fmt: skip
        cmd += ["--poll", str(args.poll)] if args.poll else []
        cmd += ["--no-explain"] if args.no_explain else []
        watch = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        time.sleep(3.0)  # the watch's start (imports, the compiled kernel)
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
        "rate": args.rate, "steps": args.steps, "seen": len(seen),
        "tokens_per_step": args.rows * args.tokens,
        "lag_median": round(float(np.median(lags)), 3),
        "lag_p90": round(float(np.percentile(lags, 90)), 3),
        "lag_max": round(float(lags.max()), 3),
        "lag_first_tenth": round(float(np.median(lags[:tenth])), 3),
        "lag_last_tenth": round(float(np.median(lags[-tenth:])), 3),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
