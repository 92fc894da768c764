"""Realistic synthetic dumps for benchmarks: verl-style Parquet sequence layout.

Responses of 50-4000 tokens, multi-turn masks (tool responses and right padding masked), several
steps and gpus, float32 logprobs with a mismatch that grows for low-probability tokens and later
turns; each response's `prompt_length` (64-2048, for `kv_position`) and a `data_source` attribute
(drawn from a generator of their own: the other columns are those of earlier versions). Written a
step at a time, so generating 100M tokens needs little memory. ``--growth F``: the mismatch of
the turns after a tool response rises over the run, its K3 F times larger at the last step than
at the first (a run going wrong in its tool turns; 1, the default, leaves the dumps as before).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

GPUS = ("H20", "L20", "A100")
SOURCES = ("gsm8k", "math", "code", "search")
NOISE = {"H20": 0.01, "L20": 0.03, "A100": 0.1}


def _response(
    rng: np.random.Generator, gpu: str, boost: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = int(rng.integers(50, 4001))
    mask = np.ones(n, dtype=np.int8)
    for _ in range(int(rng.integers(0, 4))):  # tool responses
        start = int(rng.integers(1, n))
        mask[start : start + int(rng.integers(5, 120))] = 0
    mask[n - int(rng.integers(0, 30)) :] = 0  # right padding
    lr = -rng.exponential(0.6, n) * (rng.random(n) < 0.7)
    later = np.cumsum(np.diff(np.r_[0, mask]) == 1) > 1
    scale = NOISE[gpu] * (1 + 0.5 * later) * (1 + np.sqrt(-lr))
    if boost != 1.0:  # K3 ~ r^2 / 2: the noise times sqrt(F) multiplies K3 by about F
        scale = np.where(later, scale * boost, scale)
    lt = np.minimum(lr + rng.normal(0, 1, n) * scale, 0.0)
    lr, lt = np.where(mask == 1, lr, 0.0), np.where(mask == 1, lt, 0.0)
    return mask, lr.astype(np.float32), lt.astype(np.float32)


def write_dumps(out: Path, tokens: int, steps: int = 20, seed: int = 0, growth: float = 1.0) -> int:
    """Write about ``tokens`` response positions as ``steps`` files; returns positions written.
    ``growth``: the later turns' K3 that many times larger at the last step (module docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    extra = np.random.default_rng(seed + 1)  # prompt lengths and sources
    per_step, written = tokens // steps, 0
    for step in range(steps):
        rows: dict[str, list] = {
            k: [] for k in ("uid", "gpu", "response_mask", "rollout_log_probs", "old_log_probs")
        }
        count = 0
        boost = float(np.sqrt(1.0 + (growth - 1.0) * step / max(steps - 1, 1)))
        while count < per_step:
            gpu = GPUS[len(rows["uid"]) % len(GPUS)]
            mask, lr, lt = _response(rng, gpu, boost)
            for key, value in zip(
                rows, (f"{step}-{len(rows['uid'])}", gpu, mask, lr, lt), strict=True
            ):
                rows[key].append(value)
            count += len(mask)
        n = len(rows["uid"])
        table = pa.table(
            {
                "step": pa.array(np.full(n, step, dtype=np.int64)),
                "uid": rows["uid"],
                "gpu": rows["gpu"],
                "response_mask": pa.array(rows["response_mask"], pa.list_(pa.int8())),
                "rollout_log_probs": pa.array(rows["rollout_log_probs"], pa.list_(pa.float32())),
                "old_log_probs": pa.array(rows["old_log_probs"], pa.list_(pa.float32())),
                "prompt_length": pa.array(extra.integers(64, 2049, n), pa.int64()),
                "data_source": pa.array([SOURCES[i] for i in extra.integers(0, 4, n)]),
            }
        )
        pq.write_table(table, out / f"step_{step:04d}.parquet", row_group_size=1024)
        written += count
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--tokens", type=float, default=1e6, help="response positions (e.g. 1e7)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument(
        "--growth", type=float, default=1.0, help="later turns' K3 x F at the last step"
    )
    args = parser.parse_args()
    print(write_dumps(args.out, int(args.tokens), args.steps, growth=args.growth))


if __name__ == "__main__":
    main()
