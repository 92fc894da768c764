"""What the engine serves at each step (weight sync faults) and engines that change with the step.

The trainer always scores step k with checkpoint k. The engine's weights come from `WEIGHTS`:
the same checkpoint (healthy), an older one (stale), a mix of both (a partial sync: some
parameters left at the previous checkpoint), another run's checkpoint, or a sync that breaks
from one step on. `SCHEDULES` change the engine or the rollouts step by step (growth).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from gen.engine import EngineConfig
from gen.faults import NumericPath
from gen.model import AttentionKernel
from gen.rollout import RolloutShape
from gen.train import TrainConfig, Trained

State = dict[str, torch.Tensor]
Setting = tuple[EngineConfig, RolloutShape]  # a step's engine and batch shape


@dataclass
class Weights:
    """A trained model's weights (and another run's checkpoints, for a wrong checkpoint)."""

    train: TrainConfig
    trained: Trained
    other: Trained | None = None

    def at(self, step: int) -> State:
        return self.trained.checkpoints[step]

    def before(self, step: int) -> State:
        """The weights one optimizer step (training iteration) before checkpoint `step`."""
        return self.trained.states[self.train.warmup_iters + self.train.iters_per_step * step - 1]


def kept_iterations(train: TrainConfig) -> list[int]:
    """The iterations whose weights `Weights.before` needs (one before each checkpoint)."""
    return [
        train.warmup_iters + train.iters_per_step * k - 1 for k in range(1, train.n_checkpoints)
    ]


def mixed(current: State, old: State, prefixes: tuple[str, ...]) -> State:
    """`current` with the parameters under `prefixes` taken from `old` (a partial sync)."""
    return {k: old[k] if k.startswith(prefixes) else v for k, v in current.items()}


def jump_step(n_steps: int) -> int:
    """The step from which a broken reload serves a stale layer (the middle of the run)."""
    return n_steps // 2 + 1


def reload_jump(w: Weights, step: int, n_steps: int) -> State:
    """From `jump_step` on, layer 2 keeps the weights of the step before the jump (a reload that
    leaves one layer's buffers in place); before it, every parameter is current."""
    k = jump_step(n_steps)
    if step < k:
        return w.at(step)
    return mixed(w.at(step), w.at(k - 1), ("blocks.2.",))


def lag_restart(w: Weights, step: int, n_steps: int) -> State:
    """From `jump_step` on, the engine serves weights one optimizer step behind (an asynchronous
    rollout turned on at a restart: each step's update arrives a step late); current before."""
    return w.at(step) if step < jump_step(n_steps) else w.before(step)


def head_lag_restart(w: Weights, step: int, n_steps: int) -> State:
    """From `jump_step` on, the lm_head is one checkpoint behind (a restart whose sync skips the
    head's parameters); every parameter current before."""
    if step < jump_step(n_steps):
        return w.at(step)
    return mixed(w.at(step), w.at(step - 1), ("lm_head.",))


def wrong_checkpoint(w: Weights, step: int, n_steps: int) -> State:
    assert w.other is not None, "a wrong checkpoint needs another run's checkpoints"
    return w.other.checkpoints[step]


WEIGHTS: dict[str, Callable[[Weights, int, int], State]] = {
    "current": lambda w, k, n: w.at(k),
    "iter-lag": lambda w, k, n: w.before(k),
    "ckpt-lag": lambda w, k, n: w.at(k - 1),
    "layer1-ckpt-lag": lambda w, k, n: mixed(w.at(k), w.at(k - 1), ("blocks.1.",)),
    "embed-ckpt-lag": lambda w, k, n: mixed(w.at(k), w.at(k - 1), ("tok_emb.",)),
    "head-ckpt-lag": lambda w, k, n: mixed(w.at(k), w.at(k - 1), ("lm_head.",)),
    "embed-stuck": lambda w, k, n: mixed(w.at(k), w.at(0), ("tok_emb.",)),
    "ckpt-lag-3": lambda w, k, n: w.at(max(0, k - 3)),
    "layer1-iter-lag": lambda w, k, n: mixed(w.at(k), w.before(k), ("blocks.1.",)),
    "wrong-checkpoint": wrong_checkpoint,
    "reload-jump": reload_jump,
    "lag-restart": lag_restart,
    "head-lag-restart": head_lag_restart,
}


def splitkv_falling(engine: EngineConfig, shape: RolloutShape, step: int, n: int) -> Setting:
    """Rate: a split-KV decode path whose combine forgets the row sums, taken in decode batches
    of fewer than 16 by rows whose KV length reaches a threshold that falls from 320 at the first
    step to 64 at the last: the share of tokens it hits rises step by step."""
    frac = (step - 1) / max(1, n - 1)
    threshold = round(320 - (320 - 64) * frac)
    kernel = AttentionKernel(
        split_kv=True,
        min_active_for_single_pass=16,
        min_kv_for_split=threshold,
        merge_drops_rowsum=True,
    )
    return replace(engine, kernel=kernel), shape


def splitkv_spreading(engine: EngineConfig, shape: RolloutShape, step: int, n: int) -> Setting:
    """Rate: the split-KV decode path that forgets the row sums (rows with KV >= 64) taken by
    ever larger decode batches: the batch size below which the engine splits rises from 2 at
    the first step to 32 at the last, so ever more of the decode steps take it (a heuristic
    retuned step by step, a path a growing share of the traffic takes)."""
    frac = (step - 1) / max(1, n - 1)
    kernel = AttentionKernel(
        split_kv=True,
        min_active_for_single_pass=round(2 + 30 * frac),
        min_kv_for_split=64,
        merge_drops_rowsum=True,
    )
    return replace(engine, kernel=kernel), shape


def turns_rising(engine: EngineConfig, shape: RolloutShape, step: int, n: int) -> Setting:
    """Mix: healthy numerics, but the policy takes ever more tool turns, 1 model turn per
    response at the first step and 5 at the last (the tool responses echo their expression):
    ever more tokens sit in later turns and at long KV positions, where the mismatch always was
    higher."""
    turns = 1 + round(4 * (step - 1) / max(1, n - 1))
    return engine, replace(shape, min_turns=turns, max_turns=turns, tool_echo=True)


def restarted(**change: object) -> Callable[[EngineConfig, RolloutShape, int, int], Setting]:
    """An engine restarted at the middle step (``jump_step``) with another setting: ``change``
    applied to its config from that step on (a path's fields go to its ``NumericPath``), the
    plain engine before."""

    def schedule(engine: EngineConfig, shape: RolloutShape, step: int, n: int) -> Setting:
        if step < jump_step(n):
            return engine, shape
        path_change = {k: v for k, v in change.items() if k in NumericPath.__dataclass_fields__}
        rest = {k: v for k, v in change.items() if k not in path_change}
        if path_change:
            rest["path"] = replace(engine.path or NumericPath(), **path_change)
        return replace(engine, **rest), shape

    return schedule


SCHEDULES: dict[str, Callable[[EngineConfig, RolloutShape, int, int], Setting]] = {
    "splitkv-falling": splitkv_falling,
    "splitkv-spreading": splitkv_spreading,
    "turns-rising": turns_rising,
    "fp8kv-restart": restarted(kv_cache="e4m3"),
    "weights-fp8-restart": restarted(weights_fp8=True),
    "topp-restart": restarted(top_p=0.9),
    "splitkv-restart": restarted(
        kernel=AttentionKernel(
            split_kv=True, min_active_for_single_pass=10**6, merge_drops_rowsum=True
        )
    ),
    "batchvar-restart": restarted(batch_splits=32, batch_below=10**6, batch_drop_tail=True),
    "head-bf16acc-restart": restarted(lm_head="bf16acc"),
    "fp8kv-e5m2-restart": restarted(kv_cache="e5m2"),
}
# what a growth schedule makes rise: the rate (the numerics worsen) or the mix (the policy
# samples more of the tokens that were always mismatched)
GROWTH_KINDS = {"splitkv-falling": "rate", "splitkv-spreading": "rate", "turns-rising": "mix"}
