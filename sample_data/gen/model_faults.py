"""Faults of the engine's copy of the model's own arithmetic, for the held-out kinds of fault
(gen/catalog_unseen.py): the rotary base, the attention's softmax scale, the norms' epsilon or
their statistics in bf16, the MLPs' weights quantized (int8 / int4 weight-only) or one MLP
layer's activations through a static fp8 scale that saturates, and a sliding attention window.
Each is installed in place by `install_model_faults` (from gen/faults.py's `install_path`); the
sliding window also needs the prefill mask and the decode keys (gen/faults.py's `FaultHooks`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from gen.model import ROPE_THETA, TinyLM, rope_tables

if TYPE_CHECKING:
    from gen.faults import NumericPath


class Bf16StatsNorm(nn.Module):
    """A LayerNorm whose fused kernel keeps its statistics in bf16: the mean, the centred
    squares and their mean each rounded to bf16 (the reference kernel accumulates in fp32)."""

    def __init__(self, norm: nn.LayerNorm) -> None:
        super().__init__()
        self.weight = norm.weight
        self.bias = norm.bias
        self.eps = norm.eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xb = x.bfloat16()
        mean = xb.float().mean(dim=-1, keepdim=True).bfloat16()
        centred = xb - mean  # a bf16 subtraction
        var = (centred * centred).float().mean(dim=-1, keepdim=True).bfloat16()
        rstd = torch.rsqrt(var.float() + self.eps).bfloat16()
        out = centred * rstd
        return (out * self.weight.bfloat16() + self.bias.bfloat16()).to(x.dtype)


class StaticFp8Input(nn.Module):
    """A linear layer whose input is quantized to e4m3 with a static per-tensor scale (a W8A8
    recipe's calibrated activation range): inputs beyond `amax` saturate at fp8's max."""

    def __init__(self, linear: nn.Linear, amax: float) -> None:
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias
        self.amax = amax

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from gen.faults import FP8, fp8_round  # gen/faults.py imports this module

        scale = self.amax / torch.finfo(FP8["e4m3"]).max
        return F.linear(fp8_round(x, "e4m3", scale), self.weight, self.bias)


def quantize_weight_only(w: torch.Tensor, bits: int) -> torch.Tensor:
    """Round-to-nearest symmetric integer quantization, one scale per output channel (a
    weight-only W8A16 / W4A16 checkpoint without calibration), dequantized to w's dtype."""
    top = 2 ** (bits - 1) - 1
    scale = w.float().abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / top
    return ((w.float() / scale).round().clamp(-top, top) * scale).to(w.dtype)


def install_model_faults(model: TinyLM, path: NumericPath) -> None:
    """The path's faults of the model's arithmetic, in the engine's copy (in place)."""
    if path.rope_theta:  # prefill and decode both read the model's rotary tables
        cos, sin = rope_tables(model.cfg, path.rope_theta)
        model.rope_cos, model.rope_sin = cos.to(model.rope_cos.dtype), sin.to(model.rope_sin.dtype)
    norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    for norm in norms:
        if path.norm_eps:
            norm.eps = path.norm_eps
    if path.norm_bf16:
        swap_norms(model)
    d = model.cfg.d_model
    for i, block in enumerate(model.blocks):
        if path.attn_scale != 1.0:  # the softmax scale folded into the query projection
            block.qkv.weight.data[:d] = (block.qkv.weight.data[:d].float() * path.attn_scale).to(
                block.qkv.weight.dtype
            )
        if path.mlp_bits:
            for lin in (block.fc1, block.fc2):
                lin.weight.data = quantize_weight_only(lin.weight.data, path.mlp_bits)
        if path.mlp_act_amax and i == path.mlp_act_layer:
            block.fc2 = StaticFp8Input(block.fc2, path.mlp_act_amax)


def swap_norms(module: nn.Module) -> None:
    for name, child in module.named_children():
        if isinstance(child, nn.LayerNorm):
            setattr(module, name, Bf16StatsNorm(child))
        else:
            swap_norms(child)


def rope_inv_freq(head_dim: int, theta: float = 0.0) -> torch.Tensor:
    """The rotary frequencies (fp32) at the engine's base (0: the trainer's)."""
    half = head_dim // 2
    base = theta or ROPE_THETA
    return (1.0 / (base ** (torch.arange(half, dtype=torch.float64) / half))).float()


def window_mask(allowed: torch.Tensor, window: int) -> torch.Tensor:
    """The prefill mask [B, 1, T, T] with keys `window` or more slots behind the query hidden
    (left padding keeps a row's slots contiguous, so slot distance is position distance); the
    diagonal stays so a padding query's row is defined."""
    length = allowed.shape[-1]
    idx = torch.arange(length)
    near = (idx[:, None] - idx[None, :]) < window
    return allowed & (near | torch.eye(length, dtype=torch.bool))


def window_keys(key_valid: torch.Tensor, window: int) -> torch.Tensor:
    """A decode token's keys [B, L] (itself last) within `window` slots of it."""
    length = key_valid.shape[1]
    if length <= window:
        return key_valid
    out = key_valid.clone()
    out[:, : length - window] = False
    return out
