"""Sequence dumps for `tokens`: verl's layout with token ids (``responses``), multi-turn masks
(a tool response in half the responses), prompt lengths (null for every fifth), a gpu column,
and logprobs drawn from a few values so that many tokens tie exactly on every score (the tie
order is then what decides)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

LR_VALUES = np.array([-0.01, -0.5, -2.0, -6.0])
R_VALUES = np.array([0.0, 0.05, -0.05, 0.3, -0.3, 1.5])
VOCAB = 300


def tokens_dump(path: Path, seed: int, steps: int = 4, per_step: int = 12) -> Path:
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ("step", "uid", "gpu", "ids", "lr", "lt", "mask", "pl")}
    for step in range(steps):
        for i in range(per_step):
            n = int(rng.integers(6, 60))
            mask = np.ones(n, dtype=np.int8)
            if i % 2 and n > 20:
                a = int(rng.integers(4, n - 10))
                mask[a : a + int(rng.integers(2, 6))] = 0  # a tool response
            lr = rng.choice(LR_VALUES, n)
            lt = np.minimum(lr + rng.choice(R_VALUES, n, p=[0.4, 0.2, 0.2, 0.08, 0.08, 0.04]), 0.0)
            cols["step"].append(step)
            cols["uid"].append(f"s{seed}-{step}-{i}")
            cols["gpu"].append("A100" if i % 3 == 0 else "H20")
            cols["ids"].append(rng.integers(0, VOCAB, n).tolist())
            cols["lr"].append(lr.tolist())
            cols["lt"].append(lt.tolist())
            cols["mask"].append(mask.tolist())
            cols["pl"].append(None if i % 5 == 4 else int(rng.integers(1, 500)))
    table = pa.table({
        "step": pa.array(cols["step"], pa.int64()),
        "uid": cols["uid"],
        "gpu": cols["gpu"],
        "responses": pa.array(cols["ids"], pa.list_(pa.int64())),
        "response_mask": pa.array(cols["mask"], pa.list_(pa.int8())),
        "rollout_log_probs": pa.array(cols["lr"], pa.list_(pa.float64())),
        "old_log_probs": pa.array(cols["lt"], pa.list_(pa.float64())),
        "prompt_length": pa.array(cols["pl"], pa.int64()),
    })  # fmt: skip
    pq.write_table(table, path)
    return path
