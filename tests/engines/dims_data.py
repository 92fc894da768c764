"""A Parquet sequence dump with what the new dimensions need (prompt lengths, attributes, multi-turn
masks, more than one ``order`` block per step), and an independent numpy reference of its tokens:
each model token's KV position, position in its turn, sequence length, order in its step and
attributes, computed from the raw arrays (not by mismatchctl)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SOURCES = ("gsm8k", "math", "search")
STEPS, PER_STEP = 3, 70  # 70 responses per step: three order blocks of 32


def dims_dump(path: Path, seed: int = 7, prompts: bool = True) -> Path:
    """Responses of 5-400 positions, some with a tool response (masked) and right padding,
    float32 logprobs whose mismatch grows with the KV position; ``prompt_length`` (null for every
    fifth response) when ``prompts``, ``data_source`` and ``dp_rank`` always."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ("step", "uid", "lr", "lt", "mask", "prompt", "src")}
    for step in range(STEPS):
        for i in range(PER_STEP):
            n = int(rng.integers(5, 400))
            mask = np.ones(n, dtype=np.int8)
            if n > 40 and i % 2:
                a = int(rng.integers(5, n - 20))
                mask[a : a + int(rng.integers(3, 15))] = 0  # a tool response
            mask[n - int(rng.integers(0, 4)) :] = 0  # right padding
            prompt = int(rng.integers(1, 3000))
            lr = -rng.exponential(0.8, n)
            noise = 0.02 * (1 + (prompt + np.arange(n)) / 500.0)
            lt = np.minimum(lr + rng.normal(0, 1, n) * noise, 0.0)
            cols["step"].append(step)
            cols["uid"].append(f"{step}-{i}")
            cols["lr"].append(lr.astype(np.float32).tolist())
            cols["lt"].append(lt.astype(np.float32).tolist())
            cols["mask"].append(mask.tolist())
            cols["prompt"].append(None if i % 5 == 4 else prompt)
            cols["src"].append(SOURCES[int(rng.integers(0, len(SOURCES)))])
    table = {
        "step": pa.array(cols["step"], pa.int64()),
        "uid": cols["uid"],
        "response_mask": pa.array(cols["mask"], pa.list_(pa.int8())),
        "rollout_log_probs": pa.array(cols["lr"], pa.list_(pa.float32())),
        "old_log_probs": pa.array(cols["lt"], pa.list_(pa.float32())),
        "data_source": cols["src"],
        "dp_rank": pa.array([i % 4 for i in range(len(cols["uid"]))], pa.int64()),
    }
    if prompts:
        table["prompt_length"] = pa.array(cols["prompt"], pa.int64())
    pq.write_table(pa.table(table), path)
    return path


@dataclass
class Tokens:
    """Every model token of a dump, with its raw logprobs and dimension values."""

    lr: np.ndarray
    lt: np.ndarray
    step: np.ndarray
    kv: np.ndarray  # prompt length (0 when unknown) + index in the response's arrays
    turn_pos: np.ndarray  # index within its run of model tokens
    length: np.ndarray  # model tokens of its sequence
    order: np.ndarray  # its sequence's row index within its step
    source: np.ndarray  # data_source
    dp_rank: np.ndarray


def reference_tokens(path: Path) -> Tokens:
    """The model tokens of ``dims_dump``'s file, straight from its arrays."""
    t = pq.read_table(path).to_pydict()
    out: dict[str, list] = {k: [] for k in Tokens.__dataclass_fields__}
    seen: dict[int, int] = {}
    for row in range(len(t["uid"])):
        mask = np.asarray(t["response_mask"][row]) == 1
        step = t["step"][row]
        order = seen.get(step, 0)
        seen[step] = order + 1
        prompt = (t.get("prompt_length") or [None] * len(t["uid"]))[row] or 0
        idx = np.flatnonzero(mask)
        turn_pos = np.zeros(len(mask), dtype=np.int64)
        for j in range(len(mask)):
            if mask[j]:
                turn_pos[j] = turn_pos[j - 1] + 1 if j and mask[j - 1] else 0
        k = len(idx)
        out["lr"].append(np.asarray(t["rollout_log_probs"][row], dtype=np.float64)[idx])
        out["lt"].append(np.asarray(t["old_log_probs"][row], dtype=np.float64)[idx])
        out["step"].append(np.full(k, step))
        out["kv"].append(prompt + idx)
        out["turn_pos"].append(turn_pos[idx])
        out["length"].append(np.full(k, k))
        out["order"].append(np.full(k, order))
        out["source"].append(np.full(k, t["data_source"][row], dtype=object))
        out["dp_rank"].append(np.full(k, str(t["dp_rank"][row]), dtype=object))
    return Tokens(**{k: np.concatenate(v) for k, v in out.items()})


def k3(lr: np.ndarray, lt: np.ndarray) -> np.ndarray:
    """K3 of each token: rho - 1 - r with r = trainer - rollout logprob."""
    r = lt - lr
    return np.exp(r) - 1.0 - r


def log2_bin(values: np.ndarray) -> np.ndarray:
    """The lower edge of each value's default bin: 0 for 0, else the largest power of two <= it."""
    v = np.asarray(values, dtype=np.int64)
    out = np.zeros(len(v), dtype=np.int64)
    pos = v > 0
    out[pos] = 1 << np.floor(np.log2(v[pos])).astype(np.int64)
    return out
