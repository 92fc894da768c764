"""A training job's dump writer, in stages, as a separate process for tests/watch/.

``python -m tests.watch_writer DIR ACTION...`` performs the actions in order, in DIR:

- ``step:N:NOISE[:HOT]``: step N through ``DumpWriter`` (temp file, then rename), trainer
  logprobs off the rollout ones by normal noise of scale NOISE (HOT on the second half of the
  positions: a fault of long KV lengths);
- ``partial:SRC:NAME:FRACTION``: the first FRACTION of SRC's bytes written as NAME (half a file);
- ``finish:SRC:NAME``: the rest of SRC's bytes appended to NAME;
- ``tmp:SRC:NAME``: SRC copied to ``.NAME.tmp``; ``rename:NAME``: ``.NAME.tmp`` renamed to NAME;
- ``bad:NAME``: a complete Parquet file that ingest refuses (a positive logprob).

``step_arrays`` is the data of step N, for the tests' numpy reference.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl.dump import DumpWriter

ROWS, WIDTH = 60, 64


def step_arrays(
    step: int, noise: float, hot: float | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rollout and trainer logprobs [ROWS, WIDTH] and the mask (the last positions of some rows
    masked as padding)."""
    rng = np.random.default_rng(1000 + step)
    rollout = -rng.exponential(1.0, (ROWS, WIDTH))
    scale = np.full((ROWS, WIDTH), noise)
    scale[:, WIDTH // 2 :] = noise if hot is None else hot
    trainer = np.minimum(rollout + rng.normal(0.0, 1.0, (ROWS, WIDTH)) * scale, 0.0)
    mask = np.ones((ROWS, WIDTH), dtype=np.int8)
    for i in range(ROWS):
        mask[i, WIDTH - i :] = 0
    return rollout, trainer, mask


def write_step(
    directory: Path, step: int, noise: float, hot: float | None = None, rank: int | None = None
) -> Path:
    """Step ``step`` (the same values for every ``rank``; sample ids told apart by it)."""
    rollout, trainer, mask = step_arrays(step, noise, hot)
    ids = [f"{step}-{rank or 0}-{i}" for i in range(ROWS)]
    with DumpWriter(directory, tags={"gpu": "H20"}, rank=rank) as writer:
        writer.add(step, rollout, trainer, mask, sample_ids=ids)
    return writer.written[0]


def _write(path: Path, data: bytes, mode: str) -> None:
    with open(path, mode) as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def act(directory: Path, action: str) -> None:
    kind, *args = action.split(":")
    if kind == "step":
        write_step(directory, int(args[0]), float(args[1]), *(float(a) for a in args[2:]))
    elif kind == "partial":
        data = Path(args[0]).read_bytes()
        _write(directory / args[1], data[: int(len(data) * float(args[2]))], "wb")
    elif kind == "finish":
        data, dest = Path(args[0]).read_bytes(), directory / args[1]
        _write(dest, data[dest.stat().st_size :], "ab")
    elif kind == "tmp":
        _write(directory / f".{args[1]}.tmp", Path(args[0]).read_bytes(), "wb")
    elif kind == "rename":
        os.replace(directory / f".{args[0]}.tmp", directory / args[0])
    elif kind == "bad":
        table = pa.table(
            {"step": [7], "uid": ["a"], "rollout_log_probs": [[-0.5, 0.25]],
             "old_log_probs": [[-0.5, -0.25]], "response_mask": [[1, 1]]}
        )  # fmt: skip
        pq.write_table(table, directory / args[0])
    else:
        raise SystemExit(f"unknown action {action}")


def main() -> None:
    directory = Path(sys.argv[1])
    directory.mkdir(parents=True, exist_ok=True)
    for action in sys.argv[2:]:
        act(directory, action)


if __name__ == "__main__":
    main()
