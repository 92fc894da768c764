"""`whatif --preset dppo` against SkyRL's arithmetic, transcribed in torch from
skyrl/backends/skyrl_train/utils/ppo_utils.py (SkyRL 0.3.0, NovaSky-AI/SkyRL commit a9564572,
2026-08-21): the mask, the ratio and ``clip_ratio`` of ``dppo_policy_loss`` (``safe_exp_delta`` and
``masked_mean`` of skyrl/backends/skyrl_train/utils/torch_utils.py), with the trainer's
log-probabilities as ``log_probs`` and the rollout's as ``rollout_logprobs``, on a padded batch
whose advantages all have one sign."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mismatchctl.stats.presets.base import parse_sets
from mismatchctl.stats.presets.dppo import Dppo
from tests.stats.presets.preset_data import (
    ingest_steps,
    padded,
    run_preset,
    whatif_per_step,
)
from tests.stats.presets.skyrl_torch import masked_mean, safe_exp_delta


def skyrl_dppo(log_probs, rollout_logprobs, advantages, loss_mask, c):
    """dppo_policy_loss up to the loss: (ratio, mask, clip_ratio)."""
    mu_log_probs = rollout_logprobs
    ratio = safe_exp_delta(log_probs - mu_log_probs, clip=20.0, out_dtype=log_probs.dtype)
    current_probs = torch.exp(log_probs)
    mu_probs = torch.exp(mu_log_probs)
    prob_diff = current_probs - mu_probs
    mask = torch.ones_like(advantages)
    if c.dppo_type == "binary_tv":
        mask[(advantages > 0) & (prob_diff > c.delta_high)] = 0.0
        mask[(advantages < 0) & (-prob_diff > c.delta_low)] = 0.0
    else:
        eps = 1e-8
        binary_kl = mu_probs * (mu_log_probs - log_probs) + (1 - mu_probs) * torch.log(
            (1 - mu_probs + eps) / (1 - current_probs + eps)
        )
        mask[(advantages > 0) & (prob_diff > 0) & (binary_kl > c.delta_high)] = 0.0
        mask[(advantages < 0) & (prob_diff < 0) & (binary_kl > c.delta_low)] = 0.0
    clip_ratio = masked_mean((mask == 0).float(), loss_mask).mean().item()
    return ratio, mask, clip_ratio


def _batch(seed, n_seq=30):
    rng = np.random.default_rng(seed)
    lrs, lts = [], []
    for _ in range(n_seq):
        n = int(rng.integers(1, 40))
        lr = np.log(rng.uniform(0.01, 1.0, n))
        lrs.append(lr)
        lts.append(np.minimum(lr + rng.normal(0, rng.choice([0.05, 0.3, 1.0]), n), 0.0))
    return lrs, lts


def _preset(lrs, lts, config, parts=3):
    return run_preset(Dppo(), lrs, lts, config, parts)


def _reference(lrs, lts, config, sign):
    lp, mu, mask = padded(lrs, lts)
    advantages = torch.full_like(lp, 1.0 if sign == "positive" else -1.0)
    return skyrl_dppo(lp, mu, advantages, mask, SimpleNamespace(**config)), mask


@pytest.mark.parametrize("dppo_type", ["binary_tv", "binary_kl"])
@pytest.mark.parametrize("sign", ["positive", "negative"])
def test_mask_and_clip_ratio_equal_skyrl(dppo_type: str, sign: str) -> None:
    deltas = ("0.1", "0.1") if dppo_type == "binary_tv" else ("0.02", "0.05")
    sets = [f"dppo_type={dppo_type}", f"advantage_sign={sign}", f"delta_low={deltas[0]}",
            f"delta_high={deltas[1]}"]  # fmt: skip
    config = parse_sets(Dppo(), sets)
    lrs, lts = _batch(len(dppo_type) + len(sign))
    got = _preset(lrs, lts, config)
    (ratio, mask, clip_ratio), loss_mask = _reference(lrs, lts, config, sign)
    assert 0 < clip_ratio < 1
    assert got["clip_ratio"] == pytest.approx(clip_ratio, rel=1e-12)
    assert got[f"dppo_masked_fraction_{sign}"] == pytest.approx(clip_ratio, rel=1e-12)
    w = (ratio * mask)[loss_mask > 0].numpy()
    assert got["weight_mean"] == pytest.approx(w.mean(), rel=1e-6)
    assert got["weight_max"] == pytest.approx(w.max(), rel=1e-6)
    assert got["ess"] == pytest.approx(w.sum() ** 2 / (len(w) * (w**2).sum()), rel=1e-6)
    seq_hit = ((mask == 0) & (loss_mask > 0)).any(dim=-1).double().mean().item()
    assert got["sequence_fraction"] == pytest.approx(seq_hit, abs=1e-15)


@pytest.mark.parametrize("delta", [0.02, 0.05, 0.1, 0.2, 0.4])  # a sweep of the TV threshold
def test_tv_sweep_masks_fewer_tokens_as_delta_rises(delta: float) -> None:
    lrs, lts = _batch(4)
    got = {}
    for d in (delta, delta * 2):
        config = parse_sets(Dppo(), [f"delta_high={d}", f"delta_low={d}"])
        got[d] = _preset(lrs, lts, config)
        (_, _, want), _ = _reference(lrs, lts, config, "positive")
        assert got[d]["clip_ratio"] == pytest.approx(want, rel=1e-12)
    assert got[delta * 2]["clip_ratio"] <= got[delta]["clip_ratio"]


def test_tv_is_the_probability_gap() -> None:
    lr = np.log(np.array([0.5, 0.5, 0.5]))
    lt = np.log(np.array([0.8, 0.6, 0.2]))  # Δp = +0.3, +0.1, -0.3
    config = parse_sets(Dppo(), [])
    got = _preset([lr], [lt], config, parts=1)
    assert got["dppo_masked_fraction_positive"] == pytest.approx(1 / 3)
    assert got["dppo_masked_fraction_negative"] == pytest.approx(1 / 3)


def test_cli_per_step_groups_equal_skyrl_per_batch(store: Path, tmp_path: Path) -> None:
    batches = {step: _batch(80 + step, n_seq=10) for step in range(2)}
    ingest_steps(store, tmp_path, "d", batches)
    sets = ["dppo_type=binary_kl", "delta_high=0.05", "advantage_sign=positive"]
    doc, per_step = whatif_per_step("d", "dppo", sets)
    assert doc["source"] == "skyrl/backends/skyrl_train/utils/ppo_utils.py"
    config = parse_sets(Dppo(), sets)
    for step, (lrs, lts) in batches.items():
        (_, _, want), _ = _reference(lrs, lts, config, "positive")
        assert per_step[step]["clip_ratio"] == pytest.approx(want, rel=1e-12)
