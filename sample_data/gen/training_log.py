"""A SYNTHETIC training log for the synthetic `synthetic-gpus` run (no trainer logged any of it).

`synthetic-gpus` has no training behind it (its trainer logprobs are drawn, gen/synthetic.py), so
it has no training log either. This module makes one up, clearly labelled, so that the demo shows
the training-curve view (`ingest-metrics`, then the curves of `report` / `compare` / `diagnose`)
end to end. It is written as `training_log.jsonl` next to the run's dumps: one JSON object per
line, `{"step": N, <metric>: value, ...}`, named like verl's logger.

How it is made, per step, from the run's committed dump files (read back with pyarrow, columns
`step`, `response_mask`, `rollout_log_probs` = rollout side, `old_log_probs` = trainer side):

- `kl`: the step's *realised* vllm_kl, the mean over its model tokens (mask 1) of
  exp(r) - 1 - r with r = trainer - rollout logprob (K3, docs/metrics.md);
- `response_length/mean`: measured, not drawn: the mean length of the step's responses in tokens,
  tool-response tokens included (the response's attention mask, as verl counts it; right padding
  excluded). Logged only for steps that have dumps;
- `actor/grad_norm` = 0.3 x (kl / 1e-3)^0.4 x exp(0.12 z): grows with vllm_kl, log-normal noise;
- `actor/entropy` = 0.42 + 0.09 x log10(kl / 1e-3) + 0.012 z: rises with vllm_kl;
- `actor/pg_clipfrac` = (0.002 + 0.08 x sqrt(kl)) x exp(0.1 z): rises with vllm_kl;
- `critic/score/mean`: a learning curve 0.48 + 0.17 x (1 - exp(-(i + 1) / 1.5)) (i = 0 at the first
  step) + 0.012 z that collapses to 0.35x its value from COLLAPSE_DELAY = 2 steps after the first
  step whose vllm_kl is in the high band (> 2e-2), and stays there; clipped to [0, 1].

z are independent standard normal draws of the seeded numpy Generator passed in (one array per
metric, in the order above). The log runs EXTRA_STEPS = 3 steps past the last dumped step, as a
training log does; those steps reuse the last realised vllm_kl. Floats are rounded to 6 significant
digits. The relations are invented to be plausible, not measured: nothing here is evidence about
real training.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

STEP, ROLLOUT, TRAINER, MASK = "step", "rollout_log_probs", "old_log_probs", "response_mask"
KL_UNIT = 1e-3  # vllm_kl at which the grad norm is GRAD_NORM_BASE
GRAD_NORM_BASE, GRAD_NORM_EXPONENT, GRAD_NORM_SIGMA = 0.3, 0.4, 0.12
ENTROPY_BASE, ENTROPY_SLOPE, ENTROPY_SIGMA = 0.42, 0.09, 0.012
CLIP_BASE, CLIP_SLOPE, CLIP_SIGMA = 0.002, 0.08, 0.1
SCORE_START, SCORE_GAIN, SCORE_TAU, SCORE_SIGMA = 0.48, 0.17, 1.5, 0.012
HIGH_BAND = 2e-2  # vllm_kl above this is the high band (docs/metrics.md)
COLLAPSE_DELAY = 2  # the score collapses this many steps after vllm_kl first enters the high band
COLLAPSE_FACTOR = 0.35
EXTRA_STEPS = 3  # logged steps past the last dumped step
DIGITS = 6


def step_stats(files: Sequence[Path]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(steps, vllm_kl, mean response length)`` per step of the dump files, steps sorted."""
    k3_sum: dict[int, float] = {}
    tokens: dict[int, int] = {}
    lengths: dict[int, list[float]] = {}
    for path in files:
        table = pq.read_table(path, columns=[STEP, MASK, ROLLOUT, TRAINER])
        mask_col = table.column(MASK).combine_chunks()
        row_len = pc.list_value_length(mask_col).to_numpy(zero_copy_only=False).astype(np.int64)
        mask = mask_col.flatten().to_numpy(zero_copy_only=False) == 1
        rollout, trainer = (
            table.column(c).combine_chunks().flatten().to_numpy(zero_copy_only=False)
            for c in (ROLLOUT, TRAINER)
        )
        r = trainer.astype(np.float64) - rollout.astype(np.float64)
        k3 = np.expm1(r) - r
        row_steps = table.column(STEP).to_numpy()
        row_of = np.repeat(np.arange(len(row_len)), row_len)
        pos = np.arange(len(mask)) - np.repeat(np.cumsum(row_len) - row_len, row_len)
        last = np.zeros(len(row_len), dtype=np.int64)  # response length: last model token + 1
        np.maximum.at(last, row_of[mask], pos[mask] + 1)
        for step in np.unique(row_steps).tolist():
            rows = row_steps == step
            sel = mask & rows[row_of]
            k3_sum[step] = k3_sum.get(step, 0.0) + float(k3[sel].sum())
            tokens[step] = tokens.get(step, 0) + int(sel.sum())
            lengths.setdefault(step, []).extend(last[rows].tolist())
    steps = np.array(sorted(k3_sum), dtype=np.int64)
    kl = np.array([k3_sum[s] / tokens[s] for s in steps.tolist()])
    length = np.array([float(np.mean(lengths[s])) for s in steps.tolist()])
    return steps, kl, length


def round_sig(x: float) -> float:
    return float(f"{x:.{DIGITS}g}")


def log_rows(
    steps: np.ndarray, kl: np.ndarray, length: np.ndarray, rng: np.random.Generator
) -> list[dict[str, float | int]]:
    """The log's lines (module docstring): the dumped steps, then EXTRA_STEPS more."""
    last = int(steps[-1])
    all_steps = [int(s) for s in steps] + list(range(last + 1, last + 1 + EXTRA_STEPS))
    n = len(all_steps)
    k = np.concatenate([kl, np.full(EXTRA_STEPS, kl[-1])])
    z_grad, z_ent, z_clip, z_score = (rng.standard_normal(n) for _ in range(4))
    grad = GRAD_NORM_BASE * (k / KL_UNIT) ** GRAD_NORM_EXPONENT * np.exp(GRAD_NORM_SIGMA * z_grad)
    entropy = ENTROPY_BASE + ENTROPY_SLOPE * np.log10(k / KL_UNIT) + ENTROPY_SIGMA * z_ent
    clip = (CLIP_BASE + CLIP_SLOPE * np.sqrt(k)) * np.exp(CLIP_SIGMA * z_clip)
    learned = SCORE_START + SCORE_GAIN * (1.0 - np.exp(-(np.arange(n) + 1.0) / SCORE_TAU))
    high = [s for s, v in zip(steps.tolist(), kl.tolist(), strict=True) if v > HIGH_BAND]
    collapse = high[0] + COLLAPSE_DELAY if high else math.inf
    factor = np.where(np.array(all_steps) >= collapse, COLLAPSE_FACTOR, 1.0)
    score = np.clip(learned * factor + SCORE_SIGMA * z_score, 0.0, 1.0)
    rows: list[dict[str, float | int]] = []
    for i, step in enumerate(all_steps):
        row: dict[str, float | int] = {
            "step": step,
            "actor/entropy": round_sig(entropy[i]),
            "actor/grad_norm": round_sig(grad[i]),
            "actor/pg_clipfrac": round_sig(clip[i]),
            "critic/score/mean": round_sig(score[i]),
        }
        if i < len(steps):
            row["response_length/mean"] = round_sig(length[i])
        rows.append(row)
    return rows


def write_training_log(files: Sequence[Path], out: Path, rng: np.random.Generator) -> Path:
    """Write the synthetic training log of the dump ``files`` to ``out`` (module docstring)."""
    steps, kl, length = step_stats(files)
    if not len(steps):
        raise ValueError("no dumped steps to derive a training log from")
    rows = log_rows(steps, kl, length, rng)
    with out.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return out
