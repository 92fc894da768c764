"""The sample MoE runs' routes read with pyarrow and numpy alone (not the mismatchctl package),
and the routing numbers of docs/metrics.md ("Routing") computed from them by hand.

Each response's routes are placed on its absolute positions (prompt + padded response), -1 where
a side recorded none; sample_data/README.md describes the three encodings.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq


@dataclass
class MoESequence:
    mask: np.ndarray  # response positions: 1 = model token
    r: np.ndarray  # trainer - rollout logprob per response position (0 where masked)
    prompt: int  # prompt length: response index t is absolute position prompt + t
    rollout: np.ndarray  # int [prompt + T, layers, top_k], -1 = not recorded
    trainer: np.ndarray


def decode(value: object, positions: int, start: int, top_k: int) -> np.ndarray:
    """One side's routes of one response on its absolute positions, from any of the encodings:
    nested lists, SGLang base64 int32 from ``start``, prime-rl ``{data, shape, dtype}``."""
    if isinstance(value, list):
        return np.asarray(value, dtype=np.int64)
    if isinstance(value, str):
        flat = np.frombuffer(base64.b64decode(value), dtype="<i4").astype(np.int64)
        rows = positions - 1 - start
        arr = flat.reshape(rows, -1, top_k)
    else:
        assert isinstance(value, dict), type(value)
        arr = np.frombuffer(value["data"], dtype=value["dtype"]).reshape(value["shape"])
        arr, start = arr.astype(np.int64), 0
    out = np.full((positions, *arr.shape[1:]), -1, dtype=np.int64)
    out[start : start + len(arr)] = arr
    return out


def read_moe_run(run_dir: Path, top_k: int) -> list[MoESequence]:
    out = []
    for path in sorted(run_dir.glob("step_*.parquet")):
        data = pq.read_table(path).to_pydict()
        starts = data.get("routed_experts_start_len", [0] * len(data["uid"]))
        for i in range(len(data["uid"])):
            mask = np.asarray(data["response_mask"][i], dtype=np.int8)
            prompt = len(data["prompts"][i])
            positions = prompt + len(mask)
            r = np.asarray(data["old_log_probs"][i], np.float64) - np.asarray(
                data["rollout_log_probs"][i], np.float64
            )
            sides = [
                decode(data[c][i], positions, starts[i], top_k)
                for c in ("rollout_routed_experts", "trainer_routed_experts")
            ]
            out.append(MoESequence(mask, r, prompt, *sides))
    return out


@dataclass
class Routing:
    """A run's routing numbers (docs/metrics.md), over its model tokens."""

    compared: int  # model-token positions recorded on both sides
    model_tokens: int
    token_agreement: float  # share of compared positions with equal sets on every layer
    flipped: np.ndarray  # K3 of the paired tokens whose producing position differs
    same: np.ndarray  # K3 of the paired tokens whose producing position agrees

    @property
    def k3_share_flipped(self) -> float:
        return float(self.flipped.sum() / (self.flipped.sum() + self.same.sum()))


def differs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per position: recorded on both sides, and some layer's expert set differs."""
    both = (a >= 0).all(axis=(1, 2)) & (b >= 0).all(axis=(1, 2))
    diff = (np.sort(a, axis=2) != np.sort(b, axis=2)).any(axis=(1, 2))
    return both & diff


def routing(seqs: list[MoESequence]) -> Routing:
    compared = agree = tokens = 0
    flipped, same = [], []
    for s in seqs:
        both = (s.rollout >= 0).all(axis=(1, 2)) & (s.trainer >= 0).all(axis=(1, 2))
        diff = differs(s.rollout, s.trainer)
        model = s.prompt + np.flatnonzero(s.mask == 1)  # absolute positions of the model tokens
        tokens += len(model)
        compared += int(both[model].sum())
        agree += int((both & ~diff)[model].sum())
        k3 = np.expm1(s.r[s.mask == 1]) - s.r[s.mask == 1]
        producing = model - 1  # routes are recorded per input position
        paired = both[producing]
        flipped.append(k3[paired & diff[producing]])
        same.append(k3[paired & ~diff[producing]])
    return Routing(
        compared, tokens, agree / compared, np.concatenate(flipped), np.concatenate(same)
    )
