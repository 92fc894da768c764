"""`whatif --preset trl-vllm-is` against TRL's arithmetic, transcribed in torch from
trl/trainer/grpo_trainer.py (TRL 1.10.0.dev0, commit f2cd5771): the importance-sampling ratio of
``_generate_and_score_completions`` and its ``sampling/*`` metrics, one process, on a padded
batch with a completion mask."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mismatchctl.stats.preset_trl import TrlVllmIs
from mismatchctl.stats.presets import merge, parse_sets


def trl_reference(lrs, lts, mode, clip_min, clip_max):
    width = max(len(a) for a in lrs)
    sampling = torch.zeros(len(lrs), width, dtype=torch.float64)
    old = torch.zeros_like(sampling)
    mask = torch.zeros_like(sampling)
    for i, (a, t) in enumerate(zip(lrs, lts, strict=True)):
        sampling[i, : len(a)], old[i, : len(t)], mask[i, : len(a)] = (
            torch.tensor(a), torch.tensor(t), 1.0,
        )  # fmt: skip
    per_token_logps_diff = (old - sampling) * mask
    sequence_level_is = mode in ["sequence_mask", "sequence_truncate"]
    if sequence_level_is:
        logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True)
    else:
        logps_diff = per_token_logps_diff
    ratio = torch.exp(logps_diff)
    if mode in ["sequence_truncate", "token_truncate"]:
        ratio = torch.clamp(ratio, min=clip_min, max=clip_max)
    else:
        min_val = clip_min if clip_min is not None else -math.inf
        max_val = clip_max if clip_max is not None else math.inf
        ratio = ratio.masked_fill((ratio < min_val) | (ratio > max_val), value=0.0)
    b = mask.bool()
    delta = torch.abs(old - sampling)[b]
    flat = ratio.flatten() if sequence_level_is else ratio[b]
    return {
        "sampling/sampling_logp_difference/mean": torch.mean(delta).item(),
        "sampling/sampling_logp_difference/max": torch.max(delta).item(),
        "sampling/importance_sampling_ratio/min": torch.min(flat).item(),
        "sampling/importance_sampling_ratio/mean": torch.mean(flat).item(),
        "sampling/importance_sampling_ratio/max": torch.max(flat).item(),
    }


def _batch(seed):
    rng = np.random.default_rng(seed)
    lrs, lts = [], []
    for _ in range(20):
        n = int(rng.integers(1, 25))
        lr = -rng.exponential(1.0, n)
        lrs.append(lr)
        lts.append(lr + rng.normal(0, rng.choice([0.01, 0.05, 0.3]), n))
    return lrs, lts


def _preset(lrs, lts, config, parts=2):
    preset = TrlVllmIs()
    preset.check(config)
    names = preset.fields(config)
    state = None
    for cut in np.array_split(np.arange(len(lrs)), parts):
        lr = np.concatenate([lrs[i] for i in cut])
        lt = np.concatenate([lts[i] for i in cut])
        seq = np.repeat(cut, [len(lrs[i]) for i in cut])
        s = preset.compute(lr, lt, seq, np.zeros(len(lr), np.int64), 1, config)[0]
        state = s if state is None else merge(state, s, names)
    return preset.finalize(state, config)


@pytest.mark.parametrize(
    "mode", ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
)
@pytest.mark.parametrize(
    ("clip_min", "clip_max"), [(None, 3.0), (0.5, 2.0), (0.9, 1.1), (0.5, None)]
)
def test_sampling_metrics_equal_trl(mode: str, clip_min, clip_max) -> None:
    if mode.endswith("truncate") and clip_max is None:
        clip_max = 2.0
    lrs, lts = _batch(3)
    sets = [f"vllm_importance_sampling_mode={mode}",
            f"vllm_importance_sampling_clip_min={clip_min}",
            f"vllm_importance_sampling_clip_max={clip_max}"]  # fmt: skip
    got = _preset(lrs, lts, parse_sets(TrlVllmIs(), sets))
    want = trl_reference(lrs, lts, mode, clip_min, clip_max)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12), key


def test_default_is_sequence_mask_at_3() -> None:
    config = parse_sets(TrlVllmIs(), [])
    assert config["vllm_importance_sampling_mode"] == "sequence_mask"
    assert config["vllm_importance_sampling_clip_max"] == 3.0
    with pytest.raises(ValueError, match="must be less than"):
        TrlVllmIs().check(parse_sets(TrlVllmIs(), ["vllm_importance_sampling_clip_min=4"]))
