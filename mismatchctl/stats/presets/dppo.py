"""The DPPO masks (Binary-TV and Binary-KL, arXiv 2602.04879), as SkyRL's ``dppo_policy_loss``
computes them in ``skyrl/backends/skyrl_train/utils/ppo_utils.py`` (SkyRL 0.3.0,
NovaSky-AI/SkyRL commit a9564572, 2026-08-21), with the trainer's log-probability as the policy
``log_probs`` and the rollout's as the behavior ``mu`` (SkyRL's Section 5.2 choice when rollout
log-probabilities are given): what the masks drop from the train-inference mismatch alone.

With ``p = exp(trainer)``, ``mu = exp(rollout)`` and ``Δp = p - mu``: ``binary_tv`` drops a token
of positive advantage when ``Δp > delta_high`` and one of negative advantage when ``-Δp >
delta_low``; ``binary_kl`` with ``kl = mu (log mu - log p) + (1 - mu) log((1 - mu + 1e-8) / (1 -
p + 1e-8))`` drops a positive-advantage token when ``Δp > 0`` and ``kl > delta_high``, a
negative-advantage one when ``Δp < 0`` and ``kl > delta_low``. The store holds no advantages, so
``advantage_sign`` (not a SkyRL key) says which side the common numbers and SkyRL's
``clip_ratio`` take; ``dppo_masked_fraction_positive`` and ``_negative`` give both. The applied
weight is SkyRL's ``ratio * mask`` with ``ratio = exp(clamp(trainer - rollout, -20, 20))``.
SkyRL applies its off-policy correction after the mask: that is the ``skyrl-off-policy`` preset.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from mismatchctl.stats.presets.base import (
    CellPreset,
    Cells,
    Config,
    MetricsPreset,
    require_numbers,
    state_fields,
)

TYPES = ("binary_tv", "binary_kl")
SIGNS = ("positive", "negative")
EPS = 1e-8
FIELDS = state_fields("pos", "neg")


class Dppo(CellPreset, MetricsPreset):
    name = "dppo"
    STATE = FIELDS
    framework = "SkyRL 0.3.0 (NovaSky-AI/SkyRL commit a9564572eb8e, 2026-08-21)"
    source = "skyrl/backends/skyrl_train/utils/ppo_utils.py"
    describes = (
        "DPPO Binary-TV / Binary-KL masks (SkyRL dppo_policy_loss, trainer.algorithm.dppo) on "
        "the trainer vs rollout probabilities, for one advantage sign (advantage_sign)"
    )
    clipped_key = None
    defaults: ClassVar[Config] = {  # skyrl/train/config/config.py, DPPOConfig
        "dppo_type": "binary_tv",
        "delta_low": 0.2,
        "delta_high": 0.2,
        "advantage_sign": "positive",  # not a SkyRL key: the store holds no advantages
    }

    def check(self, config: Config) -> None:
        if config["dppo_type"] not in TYPES:
            raise ValueError(f"dppo_type `{config['dppo_type']}`: binary_tv or binary_kl")
        if config["advantage_sign"] not in SIGNS:
            raise ValueError(f"advantage_sign `{config['advantage_sign']}`: positive or negative")
        require_numbers(config, ("delta_low", "delta_high"))

    def fill(self, cells: Cells, config: Config) -> tuple[np.ndarray, np.ndarray]:
        lr, lt = cells.chunk.lr, cells.chunk.lt
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            drop_pos, drop_neg = dppo_drops(lr, lt, config)
            drop = drop_pos if config["advantage_sign"] == "positive" else drop_neg
            weight = np.exp(np.clip(lt - lr, -20.0, 20.0)) * ~drop
        cells.tokens("pos", drop_pos)
        cells.tokens("neg", drop_neg)
        return drop, weight

    def metrics(self, v: dict[str, float], config: Config) -> dict[str, Any]:
        n = v["tokens"]
        return {
            "clip_ratio": v["masked"] / n,
            "dppo_masked_fraction_positive": v["pos"] / n,
            "dppo_masked_fraction_negative": v["neg"] / n,
        }


def dppo_drops(lr: np.ndarray, lt: np.ndarray, config: Config) -> tuple[np.ndarray, np.ndarray]:
    """The tokens the DPPO mask drops under a positive and under a negative advantage."""
    p, mu = np.exp(lt), np.exp(lr)
    diff = p - mu
    low, high = config["delta_low"], config["delta_high"]
    if config["dppo_type"] == "binary_tv":
        return diff > high, -diff > low
    kl = mu * (lr - lt) + (1 - mu) * np.log((1 - mu + EPS) / (1 - p + EPS))
    return (diff > 0) & (kl > high), (diff < 0) & (kl > low)
