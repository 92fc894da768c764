"""SkyRL's tensor helpers, transcribed once in torch from
skyrl/backends/skyrl_train/utils/torch_utils.py (SkyRL 0.3.0, NovaSky-AI/SkyRL commit a9564572):
both SkyRL presets' references (``test_preset_skyrl.py``, ``test_preset_dppo.py``) use them."""

from __future__ import annotations

import torch


def safe_exp_delta(delta, clip=20.0, out_dtype=None):
    y = torch.clamp(delta.to(torch.float32), -clip, clip).exp()
    return y.to(out_dtype or delta.dtype)


def masked_mean(tensor, mask, dim=None):
    return (tensor * mask).sum(axis=dim) / mask.sum(axis=dim).clamp(min=1.0)
