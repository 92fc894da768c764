"""`whatif --preset skyrl-off-policy` against SkyRL's arithmetic, transcribed in torch from
skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py (SkyRL 0.3.0, NovaSky-AI/SkyRL
commit a9564572, 2026-08-21): ``compute_off_policy_correction`` and the functions it calls, with
``safe_exp_delta`` and ``masked_mean`` of skyrl/backends/skyrl_train/utils/torch_utils.py
(``skyrl_torch.py``), on a padded batch with a loss mask as SkyRL receives it. SkyRL
exponentiates in float32 and the preset in float64, so ratios agree to 1e-6; counts agree
exactly."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mismatchctl.stats.presets.base import parse_sets
from mismatchctl.stats.presets.skyrl import SkyrlOffPolicy
from tests.stats.presets.preset_data import (
    exp_batch,
    ingest_steps,
    nonpositive,
    padded,
    run_preset,
    whatif_per_step,
)
from tests.stats.presets.skyrl_torch import masked_mean, safe_exp_delta


def outlier_mask(old, rollout, loss_mask, c):
    ratio = safe_exp_delta(old - rollout, clip=20.0, out_dtype=old.dtype)
    low, high = c.outlier_token_is_threshold_low, c.outlier_token_is_threshold_high
    none = torch.zeros_like(loss_mask, dtype=torch.bool)
    over = (ratio > high) & (loss_mask > 0) if high is not None else none
    under = (ratio < low) & (loss_mask > 0) if low is not None else none
    valid = (~over & ~under | (loss_mask == 0)).all(dim=-1, keepdim=True)
    n = float(valid.shape[0])
    return valid.float(), {
        "outlier_seq_masked_ratio": ((~valid.squeeze(-1)).sum() / n).item(),
        "outlier_seq_over_high_ratio": (over.any(dim=-1).sum() / n).item(),
        "outlier_seq_under_low_ratio": (under.any(dim=-1).sum() / n).item(),
    }


def token_mask(old, rollout, loss_mask, c):
    ratio = safe_exp_delta(old - rollout, clip=20.0, out_dtype=old.dtype)
    inside = (ratio >= c.token_mask_is_threshold_low) & (ratio <= c.token_mask_is_threshold_high)
    valid = (loss_mask > 0).sum().clamp(min=1)
    masked = ((~inside) & (loss_mask > 0)).sum()
    return (inside | (loss_mask == 0)).float(), {"token_mask_ratio": (masked / valid).item()}


def tis_ratio(old, rollout, loss_mask, kind, c):
    log_ratio = old - rollout
    ratio = safe_exp_delta(log_ratio, clip=20.0, out_dtype=old.dtype)
    if kind == "token":
        cap = c.token_tis_ratio_clip_high
        capped = (ratio > cap) & (loss_mask > 0)
        share = capped.sum() / (loss_mask > 0).sum().clamp(min=1)
        return torch.clamp(ratio, max=cap), {"tis_token_clip_high_ratio": share.item()}
    seq = safe_exp_delta((log_ratio * loss_mask).sum(dim=-1, keepdim=True), 20.0, old.dtype)
    cap = c.sequence_tis_ratio_clip_high
    share = (seq > cap).sum() / seq.shape[0]
    return torch.clamp(seq, max=cap), {"tis_seq_clip_high_ratio": share.item()}


def sequence_mask(old, rollout, loss_mask, metric, c):
    log_ratio = (old - rollout) * loss_mask
    total = log_ratio.sum(dim=-1, keepdim=True)
    if metric == "geometric":
        total = total / loss_mask.sum(dim=-1, keepdim=True).clamp(min=1.0)
        low, high, name = c.geo_mask_low, c.geo_mask_high, "geo"
    else:
        low, high, name = c.product_mask_low, c.product_mask_high, "product"
    ratio = safe_exp_delta(total, clip=20.0, out_dtype=old.dtype)
    over, under = ratio > high, ratio < low
    keep = ~over & ~under
    n = float(ratio.shape[0])
    return keep.float(), {
        f"{name}_sequence_mask_masked_ratio": ((~keep).sum() / n).item(),
        f"{name}_sequence_mask_over_high_ratio": (over.sum() / n).item(),
        f"{name}_sequence_mask_under_low_ratio": (under.sum() / n).item(),
    }


def skyrl_reference(old, rollout, loss_mask, c):
    """compute_off_policy_correction, transcribed: (tis ratio, metrics, final loss mask)."""
    ratio = safe_exp_delta(old - rollout, clip=20.0, out_dtype=old.dtype)
    metrics = {
        "is_ratio_mean": masked_mean(ratio, loss_mask).mean().item(),
        "is_ratio_std": (ratio * loss_mask).std().item(),
        "is_ratio_max": (ratio * loss_mask).max().item(),
        "is_ratio_min": (ratio * loss_mask).min().item(),
    }
    if (
        c.outlier_token_is_threshold_low is not None
        or c.outlier_token_is_threshold_high is not None
    ):
        mask, m = outlier_mask(old, rollout, loss_mask, c)
        loss_mask, metrics = loss_mask * mask, metrics | m
    if c.token_mask_is_threshold_low is not None and c.token_mask_is_threshold_high is not None:
        mask, m = token_mask(old, rollout, loss_mask, c)
        loss_mask, metrics = loss_mask * mask, metrics | m
    weight = None
    if c.tis_ratio_type is not None:
        weight, m = tis_ratio(old, rollout, loss_mask, c.tis_ratio_type, c)
        metrics |= m
    if c.sequence_mask_metric is not None:
        mask, m = sequence_mask(old, rollout, loss_mask, c.sequence_mask_metric, c)
        loss_mask, metrics = loss_mask * mask, metrics | m
    return weight, metrics, loss_mask


def _batch(seed, n_seq=24, equal=False):
    return exp_batch(seed, n_seq, [0.003, 0.05, 0.5, 2.0], length=16 if equal else None)


def _preset(lrs, lts, config, parts=3):
    return run_preset(SkyrlOffPolicy(), lrs, lts, config, parts)


def _run(sets, seed, equal=False):
    config = parse_sets(SkyrlOffPolicy(), sets)
    lrs, lts = _batch(seed, equal=equal)
    got = _preset(lrs, lts, config)
    old, rollout, mask = padded(lrs, lts)
    weight, want, final = skyrl_reference(old, rollout, mask, SimpleNamespace(**config))
    return got, want, weight, final, mask


def _assert_close(got, want, skip=()):
    for key, value in want.items():
        if key not in skip:
            assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-12), key


CONFIGS = [
    ["tis_ratio_type=token"],
    ["tis_ratio_type=sequence", "sequence_tis_ratio_clip_high=3"],
    ["sequence_mask_metric=geometric"],
    ["sequence_mask_metric=product", "product_mask_low=0.2", "product_mask_high=4"],
    ["outlier_token_is_threshold_low=1e-4", "outlier_token_is_threshold_high=100"],
    ["outlier_token_is_threshold_high=5"],
    ["token_mask_is_threshold_low=0.5", "token_mask_is_threshold_high=2"],
    [
        "tis_ratio_type=token", "token_mask_is_threshold_low=0.2", "token_mask_is_threshold_high=5",
        "outlier_token_is_threshold_low=1e-3", "outlier_token_is_threshold_high=50",
        "sequence_mask_metric=geometric", "geo_mask_low=0.95", "geo_mask_high=1.05",
    ],
    [
        "tis_ratio_type=sequence", "outlier_token_is_threshold_high=20",
        "token_mask_is_threshold_low=0.5", "token_mask_is_threshold_high=2",
        "sequence_mask_metric=product",
    ],
]  # fmt: skip


@pytest.mark.parametrize("sets", CONFIGS)
def test_metrics_and_weights_equal_skyrl(sets: list[str]) -> None:
    got, want, weight, final, mask = _run(sets, seed=len(sets) + 7)
    # over the padded tensor SkyRL's std and min count the padding zeros: see the next test
    _assert_close(got, want, skip=("is_ratio_std", "is_ratio_min"))
    assert set(want) <= set(got)
    applied = (weight if weight is not None else torch.ones_like(final)) * final
    w = applied[mask > 0].numpy()
    assert got["weight_mean"] == pytest.approx(w.mean(), rel=1e-6)
    assert got["weight_max"] == pytest.approx(w.max(), rel=1e-6)
    assert got["ess"] == pytest.approx(w.sum() ** 2 / (len(w) * (w**2).sum()), rel=1e-6)
    dropped = (final[mask > 0] == 0).numpy()
    assert got["token_fraction"] == pytest.approx(dropped.mean(), abs=1e-15)
    seq_hit = ((final == 0) & (mask > 0)).any(dim=-1).double().mean().item()
    assert got["sequence_fraction"] == pytest.approx(seq_hit, abs=1e-15)


def test_unpadded_batch_std_and_min_equal_skyrl() -> None:
    got, want, *_ = _run(["tis_ratio_type=token"], seed=3, equal=True)
    _assert_close(got, want)
    assert got["is_ratio_std"] == pytest.approx(want["is_ratio_std"], rel=1e-6)


@pytest.mark.parametrize("high", [1.001, 1.01, 1.05, 1.2])  # a sweep of the geometric band
def test_geo_mask_sweep_masks_fewer_sequences_as_the_band_widens(high: float) -> None:
    sets = ["sequence_mask_metric=geometric", f"geo_mask_high={high}", f"geo_mask_low={1 / high}"]
    got, want, *_ = _run(sets, seed=11)
    _assert_close(got, want, skip=("is_ratio_std", "is_ratio_min"))
    wider = _run([*sets[:1], f"geo_mask_high={high * 1.5}", f"geo_mask_low={1 / high / 1.5}"], 11)
    assert wider[0]["geo_sequence_mask_masked_ratio"] <= got["geo_sequence_mask_masked_ratio"]
    assert got["geo_sequence_mask_masked_ratio"] == got["sequence_fraction"]


@pytest.mark.parametrize("cap", [1.2, 2.0, 5.0])  # a sweep of the token TIS cap
def test_token_tis_sweep(cap: float) -> None:
    got, want, *_ = _run(["tis_ratio_type=token", f"token_tis_ratio_clip_high={cap}"], seed=5)
    _assert_close(got, want, skip=("is_ratio_std", "is_ratio_min"))
    assert got["weight_max"] <= cap and got["token_fraction"] == 0.0


def test_the_veto_drops_whole_sequences() -> None:
    lrs = [np.array([-1.0, -1.0, -1.0]), np.array([-1.0, -1.0])]
    lts = [np.array([-1.0, 4.0, -1.0]), np.array([-1.0, -1.0])]  # one token ratio e^5
    config = parse_sets(SkyrlOffPolicy(), ["outlier_token_is_threshold_high=100"])
    got = _preset(lrs, lts, config, parts=1)
    assert got["outlier_seq_masked_ratio"] == 0.5 and got["outlier_seq_over_high_ratio"] == 0.5
    assert got["token_fraction"] == pytest.approx(3 / 5) and got["sequence_fraction"] == 0.5


def test_cli_per_step_groups_equal_skyrl_per_batch(store: Path, tmp_path: Path) -> None:
    batches = {step: nonpositive(_batch(40 + step, n_seq=10)) for step in range(3)}
    ingest_steps(store, tmp_path, "s", batches)
    sets = ["tis_ratio_type=token", "sequence_mask_metric=geometric"]
    doc, per_step = whatif_per_step("s", "skyrl-off-policy", sets)
    assert doc["source"] == "skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py"
    config = SimpleNamespace(**parse_sets(SkyrlOffPolicy(), sets))
    for step, (lrs, lts) in batches.items():
        _, want, _ = skyrl_reference(*padded(lrs, lts), config)
        _assert_close(per_step[step], want, skip=("is_ratio_std", "is_ratio_min"))
