"""A transformers KV cache whose stored keys and values are rounded as an engine's cache would
store them: in bfloat16, or in fp8 e4m3 with a per-tensor scale or a scale per KV head (per
layer, for keys and values apart, set by the first states written: the prompts', as a calibrated
static scale would be).
Each layer's ``update`` rounds the new states before they are stored and attended to, so the
token being decoded attends to its own stored key and value, as in an engine."""

from __future__ import annotations

from typing import Any

from mismatchctl.bisect.model import torch_module

FP8_MAX = 448.0  # the largest finite float8_e4m3fn


def kv_supported(module: Any) -> str | None:
    """Why a stored-precision cache cannot be built for this model (None: it can)."""
    try:
        from transformers import DynamicCache
    except ImportError:
        return "needs transformers"
    cache = _new(DynamicCache, module)
    if not getattr(cache, "layers", None):
        return "this transformers version's cache has no per-layer update to round the states"
    return None


def quantizing_cache(module: Any, kv: str | None) -> Any:
    """A fresh cache for one sequence; its stored states rounded as ``kv`` says (None: as
    computed)."""
    from transformers import DynamicCache

    cache = _new(DynamicCache, module)
    if kv is not None:
        for layer in cache.layers:
            layer.update = _rounding(layer.update, kv)
    return cache


def _new(cache_class: Any, module: Any) -> Any:
    """A cache with its layers made for the model's config (older transformers: built lazily)."""
    try:
        return cache_class(config=module.config)
    except TypeError:
        return cache_class()


class Rounder:
    """A factory module's ``kv`` callable (bisect/model.py): each layer's new keys and values
    rounded as ``kv`` says before they are stored, with the fp8 scales per layer as above."""

    def __init__(self, kv: str) -> None:
        self.kv = kv
        self.scales: dict[int, dict[str, Any]] = {}

    def __call__(self, layer: int, keys: Any, values: Any) -> tuple[Any, Any]:
        scales = self.scales.setdefault(layer, {})
        return _round(keys, self.kv, scales, "k"), _round(values, self.kv, scales, "v")


def _rounding(update: Any, kv: str) -> Any:
    scales: dict[str, Any] = {}

    def rounded(key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
        k = _round(key_states, kv, scales, "k")
        v = _round(value_states, kv, scales, "v")
        return update(k, v, *args, **kwargs)

    return rounded


def _round(x: Any, kv: str, scales: dict[str, Any], which: str) -> Any:
    torch = torch_module()
    if kv == "bf16":
        return x.to(torch.bfloat16).to(x.dtype)
    if which not in scales:  # keys and values [batch, heads, length, head_dim]
        amax = x.abs().amax(dim=(0, 2, 3), keepdim=True) if kv == "fp8-head" else x.abs().amax()
        scales[which] = (amax.float() / FP8_MAX).clamp(min=1e-12)
    scale = scales[which]
    q = (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return (q.float() * scale).to(x.dtype)
