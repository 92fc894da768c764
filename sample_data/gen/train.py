"""Brief CPU training of the small model; checkpoints along training are the RL training steps."""

from __future__ import annotations

import copy
import time
from collections.abc import Collection
from dataclasses import dataclass, field

import torch

from gen.model import ModelConfig
from gen.moe import MoELM, make_model


@dataclass(frozen=True)
class TrainConfig:
    warmup_iters: int  # iterations before checkpoint 0
    iters_per_step: int  # iterations between consecutive checkpoints (one RL step)
    n_checkpoints: int  # checkpoints 0..n-1
    batch: int = 16
    context: int = 320
    lr: float = 3e-3
    step_lr: float = 5e-4  # smaller learning rate between checkpoints, like RL fine-tuning
    weight_decay: float = 0.01


@dataclass
class Trained:
    checkpoints: list[dict[str, torch.Tensor]]  # index = RL step
    losses: list[float]
    # the weights before each iteration of train(..., keep_iters=...)
    states: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)


def lr_at(it: int, cfg: TrainConfig) -> float:
    # linear warm-up, constant pre-training rate, then a smaller constant rate between checkpoints:
    # the policy keeps moving a little per step (stale weights are visible) without drifting away
    if it >= cfg.warmup_iters:
        return cfg.step_lr
    return cfg.lr * min(1.0, (it + 1) / 50)


def train(
    model_cfg: ModelConfig,
    cfg: TrainConfig,
    data: torch.Tensor,
    seed: int,
    log: bool = True,
    keep_iters: Collection[int] = (),
) -> Trained:
    """Train from scratch; return checkpoint state dicts (index = RL step), the loss curve and
    the weights before each iteration of `keep_iters` (e.g. one optimizer step before a
    checkpoint)."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = make_model(model_cfg)  # TinyLM, or its MoE variant for a MoEConfig
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    total = cfg.warmup_iters + cfg.iters_per_step * (cfg.n_checkpoints - 1)
    result = Trained([], [])
    checkpoints, losses = result.checkpoints, result.losses
    start = time.perf_counter()
    for it in range(total + 1):
        if it >= cfg.warmup_iters and (it - cfg.warmup_iters) % cfg.iters_per_step == 0:
            checkpoints.append(copy.deepcopy(model.state_dict()))
        if it in keep_iters:
            result.states[it] = copy.deepcopy(model.state_dict())
        if it == total:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(it, cfg)
        offsets = torch.randint(0, data.numel() - cfg.context - 1, (cfg.batch,), generator=gen)
        window = torch.stack([data[o : o + cfg.context + 1] for o in offsets.tolist()])
        logits = model(window[:, :-1])
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), window[:, 1:].reshape(-1)
        )
        losses.append(loss.item())  # the language-modelling loss, without the MoE's balancing term
        if isinstance(model, MoELM):
            loss = loss + model.aux_loss()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if log and (it % 50 == 0 or it == total - 1):
            rate = (it + 1) / (time.perf_counter() - start)
            print(
                f"  train iter {it:5d}/{total} loss {losses[-1]:.3f} ({rate:.1f} it/s)", flush=True
            )
    return result
