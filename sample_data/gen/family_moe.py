"""The family's mixture-of-experts member: transformers' Qwen2-MoE built from a config (16 routed
experts, top-4 by a softmax over all of them, the kept weights not renormalised; a shared expert
behind a sigmoid gate; q/k/v biases) over the family's BPE vocabulary.

Nothing of it is shared with the sample MoE (gen/moe.py: 8 experts, top-2 renormalised, no
shared expert, LayerNorm, a byte vocabulary), so its healthy flip rate, the K3 a flip carries and
its faults' sizes are its own.

Each router is tapped (`tap_routers`), as an engine with routed-experts capture and a trainer with
rollout routing replay are:

- ``chosen``: the expert ids of its last call, one row per input position (the capture);
- ``forced``: ids to use instead, ``NO_ROUTE`` rows routed by the router itself (the replay: the
  weights still come from this side's own router probabilities, as R3 recomputes them);
- ``rounding``: the engine's router logits rounded to an fp8 format before the softmax (a fault).
"""

from __future__ import annotations

import types
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from transformers import Qwen2MoeConfig

NO_ROUTE = -1
ROUTER = "Qwen2MoeTopKRouter"


@dataclass(frozen=True)
class MoEShape:
    """Layers, routed experts and top-k of the member (``family.py --moe-shape LxExK``)."""

    layers: int = 4
    experts: int = 16
    top_k: int = 4

    @classmethod
    def parse(cls, text: str) -> MoEShape:
        layers, experts, top_k = (int(x) for x in text.lower().split("x"))
        if not 0 < top_k <= experts or layers <= 0:
            raise ValueError(f"--moe-shape {text}: expected LAYERSxEXPERTSxTOPK, top-k <= experts")
        return cls(layers, experts, top_k)

    @property
    def label(self) -> str:
        return f"qwen2moe-{self.layers}x128-{self.experts}e-top{self.top_k}"


DEFAULT = MoEShape()


def moe_config(vocab: int, shape: MoEShape = DEFAULT) -> Qwen2MoeConfig:
    """The member's config; wider experts' hidden widths shrink so that the routed experts a
    token uses keep the default's width (top-k x width = 256)."""
    return Qwen2MoeConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=352,
        num_hidden_layers=shape.layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        rms_norm_eps=1e-6,
        num_experts=shape.experts,
        num_experts_per_tok=shape.top_k,
        moe_intermediate_size=256 // shape.top_k,
        shared_expert_intermediate_size=128,
        norm_topk_prob=False,
        router_aux_loss_coef=0.01,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )


def _tapped_forward(
    self: torch.nn.Module, hidden: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Qwen2MoeTopKRouter.forward, with the capture, the replay and the engine's rounding."""
    hidden = hidden.reshape(-1, self.hidden_dim)
    logits = F.linear(hidden, self.weight)
    if self.rounding is not None:
        logits = logits.to(self.rounding).to(hidden.dtype)
    probs = torch.softmax(logits, dtype=torch.float, dim=-1)
    top, ids = torch.topk(probs, self.top_k, dim=-1)
    if self.forced is not None:
        forced = self.forced.reshape(-1, self.top_k)
        ids = torch.where(forced[:, :1] >= 0, forced, ids)
        top = probs.gather(1, ids)
    if self.norm_topk_prob:
        top = top / top.sum(dim=-1, keepdim=True)
    self.chosen = ids
    return logits, top.to(logits.dtype), ids


def routers(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if type(m).__name__ == ROUTER]


def tap_routers(model: torch.nn.Module, rounding: torch.dtype | None = None) -> None:
    """Tap every router of ``model`` (a no-op on a dense model)."""
    for router in routers(model):
        router.chosen = None
        router.forced = None
        router.rounding = rounding
        router.forward = types.MethodType(_tapped_forward, router)


def is_moe(model: torch.nn.Module) -> bool:
    return bool(routers(model))


def last_routes(model: torch.nn.Module, batch: int, length: int) -> np.ndarray:
    """The expert ids of the last forward over ``[batch, length]`` inputs: int16
    ``[batch, length, layers, top_k]``."""
    chosen = [r.chosen.view(batch, length, -1) for r in routers(model)]
    return torch.stack(chosen, dim=2).numpy().astype(np.int16)


def force(model: torch.nn.Module, routes: torch.Tensor | None) -> None:
    """Use these ids ``[batch, length, layers, top_k]`` (``NO_ROUTE`` rows: route yourself), or
    stop replaying (None)."""
    for layer, router in enumerate(routers(model)):
        router.forced = None if routes is None else routes[:, :, layer].contiguous()


def forced_rows(routes: list[np.ndarray], length: int, layers: int, top_k: int) -> torch.Tensor:
    """Per sequence, its first rows replayed, the rest ``NO_ROUTE``."""
    out = torch.full((len(routes), length, layers, top_k), NO_ROUTE, dtype=torch.long)
    for i, rows in enumerate(routes):
        out[i, : len(rows)] = torch.from_numpy(rows.astype(np.int64))
    return out
