"""The clearly labelled synthetic multi-GPU run.

It reuses the reference run's real rollout logprobs, tokens and turn structure, and draws trainer
logprobs so that each step's vllm_kl per GPU lands on the magnitudes published for H20, L20 and
A100.
The perturbation is applied to the token's logit, log p' = log sigmoid(logit(p) + eps), so a token
with p near 1 barely moves while a low-probability token moves by about eps: the mismatch sits in
low-probability tokens, as observed. eps is larger in turns that follow a tool response.
"""

from __future__ import annotations

import copy
import math

import numpy as np

from gen.rollout import Sample

GPUS = ("H20", "L20", "A100")
LATER_TURN_FACTOR = 2.5  # eps multiplier for model turns after a tool response


def target_kl(gpu: str, step: int, n_steps: int, rng: np.random.Generator) -> float:
    """Per-step vllm_kl target: H20 5e-4..1e-3, L20 1e-3..1e-2, A100 1e-2 drifting up towards 1."""
    if gpu == "H20":
        return float(10 ** rng.uniform(math.log10(5e-4), -3.0))
    if gpu == "L20":
        return float(10 ** rng.uniform(-3.0, -2.0))
    frac = (step - 1) / max(1, n_steps - 1)
    return float(10 ** (-2.0 + 1.6 * frac + rng.uniform(-0.2, 0.2)))


def turn_index(mask: np.ndarray) -> np.ndarray:
    """Turn number of every position (a turn is a maximal run of 1s); -1 outside turns."""
    starts = (mask == 1) & (np.concatenate(([0], mask[:-1])) == 0)
    return np.where(mask == 1, np.cumsum(starts) - 1, -1)


def perturbed(lr: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """log sigmoid(logit(p) + eps) for p = exp(lr), computed stably in float64."""
    lr = np.minimum(lr, -1e-7)  # p == 1 in float32: keep the logit finite
    logit = lr - np.log(-np.expm1(lr))
    z = logit + eps
    return -np.logaddexp(0.0, -z)


def k3_mean(lr: np.ndarray, eps: np.ndarray) -> float:
    r = perturbed(lr, eps) - lr
    return float(np.mean(np.expm1(r) - r))


def calibrate(lr: np.ndarray, unit: np.ndarray, target: float) -> float:
    """Scale s with mean K3 of eps = s * unit equal to target (monotone in s: bisect log s)."""
    lo, hi = 1e-6, 1e3
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        if k3_mean(lr, mid * unit) < target:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def synthesize_step(
    ref: list[Sample], step: int, n_steps: int, rng: np.random.Generator
) -> tuple[list[Sample], list[str]]:
    """Copies of the reference samples with synthetic trainer logprobs, and their gpu labels."""
    samples = [copy.deepcopy(s) for s in ref]
    # a GRPO group (same prompt) runs on one GPU; the groups rotate over the three GPUs
    group_of = {s.uid.rsplit("-r", 1)[0] for s in samples}
    order = sorted(group_of)
    gpus = [GPUS[order.index(s.uid.rsplit("-r", 1)[0]) % len(GPUS)] for s in samples]
    for gpu in GPUS:
        members = [s for s, g in zip(samples, gpus, strict=True) if g == gpu]
        lrs, units = [], []
        for s in members:
            mask = np.asarray(s.mask, dtype=np.int8)
            model = mask == 1
            later = turn_index(mask)[model] >= 1
            lrs.append(np.asarray(s.rollout_lp, dtype=np.float64)[model])
            units.append(
                rng.standard_normal(int(model.sum())) * np.where(later, LATER_TURN_FACTOR, 1.0)
            )
        scale = calibrate(
            np.concatenate(lrs), np.concatenate(units), target_kl(gpu, step, n_steps, rng)
        )
        for s, lr, unit in zip(members, lrs, units, strict=True):
            lt = iter(perturbed(lr, scale * unit).astype(np.float32).tolist())
            s.trainer_lp = [next(lt) if m else 0.0 for m in s.mask]
    return samples, gpus
