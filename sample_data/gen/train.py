"""Brief CPU training of the small model; checkpoints along training are the RL training steps."""

from __future__ import annotations

import copy
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Protocol

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


class Schedule(Protocol):
    """What the learning rate schedule reads of a training config (``TrainConfig`` here,
    ``FamilyTraining`` in gen/family_model.py)."""

    warmup_iters: int
    lr: float
    step_lr: float


def lr_at(it: int, cfg: Schedule) -> float:
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
        window = windows(data, cfg.context, cfg.batch, gen)
        loss = next_token_loss(model(window[:, :-1]), window)
        losses.append(loss.item())  # the language-modelling loss, without the MoE's balancing term
        if isinstance(model, MoELM):
            loss = loss + model.aux_loss()
        optimizer_step(opt, model, loss)
        if log and (it % 50 == 0 or it == total - 1):
            log_iter(it, total, losses[-1], start)
    return result


def windows(data: torch.Tensor, context: int, batch: int, gen: torch.Generator) -> torch.Tensor:
    """``batch`` random windows of ``context + 1`` tokens of the training stream."""
    offsets = torch.randint(0, data.numel() - context - 1, (batch,), generator=gen)
    return torch.stack([data[o : o + context + 1] for o in offsets.tolist()])


def next_token_loss(logits: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
    """The language-modelling loss of the logits of ``window[:, :-1]`` on its next tokens."""
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), window[:, 1:].reshape(-1)
    )


def optimizer_step(opt: torch.optim.Optimizer, model: torch.nn.Module, loss: torch.Tensor) -> None:
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def log_iter(it: int, total: int, loss: float, start: float) -> None:
    rate = (it + 1) / (time.perf_counter() - start)
    print(f"  train iter {it:5d}/{total} loss {loss:.3f} ({rate:.1f} it/s)", flush=True)
