"""A small mixture-of-experts variant of TinyLM: the same attention, rotary positions, embeddings
and both numeric paths (gen/model.py), with each block's feed-forward replaced by top-k routed
experts (Mixtral style: a linear router, softmax over the experts, the top-k kept and their
weights renormalised).

Every MoE block records the expert ids it used for each input position (``chosen``), as an
engine with routed-experts capture does; ``forced`` makes it use given ids instead (rollout
routing replay: the trainer reuses the engine's routes, recomputing the weights from its own
router logits).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gen.model import Block, ModelConfig, TinyLM

NO_ROUTE = -1  # a position without a recorded route (and, in `forced`: route it yourself)


@dataclass(frozen=True)
class MoEConfig(ModelConfig):
    d_ff: int = 0  # no dense feed-forward: each block's experts have width d_expert
    n_experts: int = 8
    top_k: int = 2
    d_expert: int = 128  # hidden width of each expert's MLP
    aux_weight: float = 0.01  # Switch-style load-balancing loss weight (training only)


class Expert(nn.Module):
    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, cfg.d_expert)
        self.fc2 = nn.Linear(cfg.d_expert, cfg.d_model)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(h)))


class MoEBlock(Block):
    cfg: MoEConfig

    def build_ffn(self, cfg: ModelConfig) -> None:
        assert isinstance(cfg, MoEConfig)
        self.router = nn.Linear(cfg.d_model, cfg.n_experts, bias=False)
        self.experts = nn.ModuleList(Expert(cfg) for _ in range(cfg.n_experts))
        self.forced: torch.Tensor | None = None  # [B, T, top_k] ids to use, NO_ROUTE: own choice
        self.chosen: torch.Tensor | None = None  # [B, T, top_k] the ids of the last call
        self.aux: torch.Tensor | None = None  # the last training call's load-balancing loss
        self.router_dtype: torch.dtype | None = None  # a lower-precision router (gen/faults.py)

    def ffn(self, h: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        flat = h.reshape(-1, cfg.d_model)
        # router logits in the weights' dtype (bf16 on the engine), softmax in fp32
        logits = self.router(flat)
        if self.router_dtype is not None:
            logits = logits.to(self.router_dtype)
        probs = torch.softmax(logits.float(), dim=-1)
        ids = probs.topk(cfg.top_k, dim=-1).indices
        if self.forced is not None:
            forced = self.forced.reshape(-1, cfg.top_k)
            ids = torch.where(forced[:, :1] >= 0, forced, ids)
        gate = probs.gather(1, ids)
        gate = (gate / gate.sum(dim=-1, keepdim=True)).to(h.dtype)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows, slot = (ids == e).nonzero(as_tuple=True)
            if rows.numel():
                out.index_add_(0, rows, expert(flat[rows]) * gate[rows, slot, None])
        self.chosen = ids.view(*h.shape[:-1], cfg.top_k)
        if self.training:
            load = torch.bincount(ids.reshape(-1), minlength=cfg.n_experts) / ids.numel()
            self.aux = cfg.n_experts * (load * probs.mean(dim=0)).sum()
        return out.view_as(h)


class MoELM(TinyLM):
    block_class = MoEBlock
    cfg: MoEConfig

    def moe_blocks(self) -> list[MoEBlock]:
        return [b for b in self.blocks if isinstance(b, MoEBlock)]

    def routes(self) -> np.ndarray:
        """The expert ids of the last call: int16 [B, T, layers, top_k]."""
        chosen = [b.chosen for b in self.moe_blocks() if b.chosen is not None]
        assert len(chosen) == self.cfg.n_layers, "routes() before a forward pass"
        return torch.stack(chosen, dim=2).numpy().astype(np.int16)

    def force(self, routes: torch.Tensor | None) -> None:
        """Use these ids [B, T, layers, top_k] (NO_ROUTE rows: route yourself), or stop."""
        for layer, block in enumerate(self.moe_blocks()):
            block.forced = None if routes is None else routes[:, :, layer]

    def aux_loss(self) -> torch.Tensor:
        aux = [b.aux for b in self.moe_blocks() if b.aux is not None]
        assert len(aux) == self.cfg.n_layers, "aux_loss() before a training forward pass"
        return self.cfg.aux_weight * torch.stack(aux).sum()


def make_model(cfg: ModelConfig) -> TinyLM:
    """The model a config describes: TinyLM, or its mixture-of-experts variant."""
    return MoELM(cfg) if isinstance(cfg, MoEConfig) else TinyLM(cfg)
