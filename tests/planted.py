"""Dumps with planted causes, in the sequence layout (one Parquet row per response).

Tokens are sampled from softmax distributions over a small vocabulary (contexts from peaked to
flat), so both logprob sides behave like a model's: the rollout side is the log-probability of
the sampled token under the distribution it was sampled from, the trainer side its
log-probability under the trainer's distribution. The clean trainer side carries small symmetric
noise growing with -lr: ``lt = lr * exp(sigma * eps)`` (r has standard deviation ~sigma |lr|,
and lt stays <= 0). Each cause changes one thing:

- ``shift``: the trainer array shifted one position later (its first value is a masked 0.0);
- ``temperature``: the rollout side sampled and scored at T = 0.7, the trainer untempered;
- ``top_p``: the rollout side renormalised over the top-p = 0.8 nucleus;
- ``sentinel``: trainer values overwritten with 0.0 on the last 8 tokens of some sequences,
  and with -9999 once;
- ``spike``: sigma x 15 on two steps; ``trend``: sigma growing 30-fold over the run;
- ``gpu``: sigma x 15 on the sequences of gpu A100; ``stale``: sigma x 12 on the sequences made
  with the previous weights (weight_version = step - 1);
- ``tool``: sigma x 8 on the turns after a tool response;
- ``lowprob``: tokens sampled with p < 1e-3 get a trainer probability 3 to 20 times smaller;
- ``spiral``: the trend, while the contexts flatten over the run (both perplexities climb).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

VOCAB = 64
SIGMA = 0.02
SPIKE_STEPS = (7, 15)


@dataclass
class Plan:
    cause: str = "clean"
    steps: int = 24
    per_step: int = 16
    seed: int = 0


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def _sample(rng: np.random.Generator, logp: np.ndarray) -> np.ndarray:
    c = np.exp(logp).cumsum(axis=1)
    u = rng.random((len(logp), 1)) * c[:, -1:]
    return np.minimum((c < u).sum(axis=1), logp.shape[1] - 1)


def _top_p(logp: np.ndarray, p: float) -> np.ndarray:
    probs = np.exp(logp)
    order = np.argsort(-probs, axis=1)
    sorted_p = np.take_along_axis(probs, order, axis=1)
    keep_sorted = (sorted_p.cumsum(axis=1) - sorted_p) < p
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=1)
    kept = np.where(keep, probs, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(kept / kept.sum(axis=1, keepdims=True))


def token_logprobs(
    rng: np.random.Generator, n: int, cause: str, sharpness: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """(rollout, noiseless trainer) logprobs of n sampled tokens."""
    scale = rng.choice([1.0, 3.0, 6.0, 10.0], n, p=[0.2, 0.3, 0.3, 0.2]) * sharpness
    base = _log_softmax(rng.normal(0.0, 1.0, (n, VOCAB)) * scale[:, None])
    sampler = base
    if cause == "temperature":
        sampler = _log_softmax(base / 0.7)
    elif cause == "top_p":
        sampler = _top_p(base, 0.8)
    tok = _sample(rng, sampler)
    rows = np.arange(n)
    return sampler[rows, tok], base[rows, tok]


def _sigma(plan: Plan, step: int, gpu: str, stale: bool) -> float:
    sigma = SIGMA
    if plan.cause == "spike" and step in SPIKE_STEPS:
        sigma *= 15
    if plan.cause in ("trend", "spiral"):
        sigma *= 30 ** (step / (plan.steps - 1))
    if plan.cause == "gpu" and gpu == "A100":
        sigma *= 15
    if plan.cause == "stale" and stale:
        sigma *= 12
    return sigma


def rows(plan: Plan) -> list[dict]:
    rng = np.random.default_rng(plan.seed)
    out = []
    for step in range(plan.steps):
        for i in range(plan.per_step):
            gpu = "A100" if i % 2 else "H20"
            stale = plan.cause == "stale" and i % 3 == 0
            out.append(_row(rng, plan, step, i, gpu, stale))
    if plan.cause == "sentinel":
        out[5]["old_log_probs"][2] = -9999.0
    return out


def _row(rng: np.random.Generator, plan: Plan, step: int, i: int, gpu: str, stale: bool) -> dict:
    first, tool, later = int(rng.integers(15, 45)), 0, 0
    if (i // 2) % 2 == 0:  # half of the rollouts, on both gpus, call a tool and go on
        tool, later = int(rng.integers(3, 8)), int(rng.integers(8, 25))
    mask = np.r_[np.ones(first), np.zeros(tool), np.ones(later)].astype(np.int8)
    n = first + later
    sharpness = 1.0 - 0.6 * step / (plan.steps - 1) if plan.cause == "spiral" else 1.0
    lr, lt = token_logprobs(rng, n, plan.cause, sharpness)
    sigma = np.full(n, _sigma(plan, step, gpu, stale))
    if plan.cause == "tool":
        sigma[first:] *= 8
    lt = lt * np.exp(sigma * rng.standard_normal(n))
    if plan.cause == "lowprob":
        rare = lr < np.log(1e-3)
        lt[rare] -= rng.uniform(np.log(3), np.log(20), int(rare.sum()))
    roll, train = np.zeros(len(mask)), np.zeros(len(mask))
    roll[mask == 1], train[mask == 1] = lr, lt
    if plan.cause == "shift":
        train = np.r_[0.0, train[:-1]]
    if plan.cause == "sentinel" and i % 5 == 0:
        train[np.flatnonzero(mask)[-8:]] = 0.0
    return {
        "step": step,
        "uid": f"s{step}-{i}",
        "rollout_log_probs": roll.tolist(),
        "old_log_probs": train.tolist(),
        "response_mask": mask.tolist(),
        "gpu": gpu,
        "weight_version": step - 1 if stale else step,
    }


SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("uid", pa.string()),
        ("rollout_log_probs", pa.list_(pa.float64())),
        ("old_log_probs", pa.list_(pa.float64())),
        ("response_mask", pa.list_(pa.int8())),
        ("gpu", pa.string()),
        ("weight_version", pa.int64()),
    ]
)


def write(plan: Plan, path: Path, *, weight_version: bool = True) -> Path:
    table = pa.Table.from_pylist(rows(plan), schema=SCHEMA)
    if not weight_version:
        table = table.drop_columns(["weight_version"])
    pq.write_table(table, path)
    return path
