"""The healthy runs of the calibration corpus (and the improvements): the false-alarm budget.

Each varies what healthy stacks vary: the sampling stream, the prompt loader, the checkpoint
(another training seed, another model size), the batch partition, the decode batch size, the
turn structure and the sampling temperature (applied on both sides), the devices; an MoE with
and without routing replay. Each names as baseline another healthy run of the same model and
stack with other rollouts.
"""

from __future__ import annotations

from typing import Any

import torch

from gen.calib_spec import CalibRun, Replica
from gen.catalog_common import WAVES
from gen.engine import EngineConfig

GPUS = ("H100", "H100", "A100", "L20")  # a multi-device run's replicas, by request hash


def healthy(name: str, baseline: str, what: str, **knobs: Any) -> CalibRun:
    return CalibRun(name, "healthy", None, what, None, baseline, **knobs)


def improvement(name: str, baseline: str, what: str, **knobs: Any) -> CalibRun:
    return CalibRun(name, "improvement", None, what, None, baseline, **knobs)


def at(temperature: float) -> EngineConfig:
    return EngineConfig(temperature=temperature)


def replicas(*engines: EngineConfig | None) -> tuple[Replica, ...]:
    """The four devices, each with its engine (None: the run's)."""
    return tuple(Replica(gpu, e) for gpu, e in zip(GPUS, engines, strict=True))


HEALTHY_GPUS = replicas(None, None, None, None)

HEALTHY: tuple[CalibRun, ...] = (
    healthy("h-a", "h-b", "bf16 KV-cache engine vs fp32 trainer, loader a"),
    healthy("h-b", "h-a", "as h-a, loader b (other prompts, turn counts, tool calls)", loader="b"),
    healthy("h-c", "h-a", "as h-a, loader c", loader="c"),
    healthy("h-a2", "h-a", "h-a's prompts, another sampling stream"),
    healthy("h-6x8", "h-a", "6 prompts x 8 responses per step", shape="6x8", loader="d"),
    healthy("h-16x2", "h-b", "16 prompts x 2 responses per step", shape="16x2", loader="e"),
    healthy("h-12x4", "h-c", "12 prompts x 4 responses per step", shape="12x4", loader="f"),
    healthy("h-wave4", "h-b", "the engine admits 4 requests at once", max_batch=4, loader="g"),
    healthy("h-wave12", "h-a", "the engine admits 12 requests at once", max_batch=12, loader="h"),
    healthy(
        "h-one-turn", "h-one-turn-b", "single-turn responses of up to 64 bytes", shape="one-turn"
    ),
    healthy("h-one-turn-b", "h-one-turn", "as h-one-turn, loader b", shape="one-turn", loader="b"),
    healthy(
        "h-many-turns",
        "h-many-turns-b",
        "4-5 turns, longer tool responses (echoed)",
        shape="many-turns",
    ),
    healthy(
        "h-many-turns-b",
        "h-many-turns",
        "as h-many-turns, loader b",
        shape="many-turns",
        loader="b",
    ),
    healthy("h-t06", "h-t06-b", "temperature 0.6 on both sides", engine=at(0.6)),
    healthy("h-t06-b", "h-t06", "as h-t06, loader b", engine=at(0.6), loader="b"),
    healthy("h-t08", "h-a", "temperature 0.8 on both sides", engine=at(0.8), loader="i"),
    healthy("h-t10", "h-t10-b", "temperature 1.0 on both sides", engine=at(1.0)),
    healthy("h-t10-b", "h-t10", "as h-t10, loader b", engine=at(1.0), loader="b"),
    healthy("h-seed1-a", "h-seed1-b", "the model trained with seed 1", model="tinylm-seed1"),
    healthy("h-seed1-b", "h-seed1-a", "as h-seed1-a, loader b", model="tinylm-seed1", loader="b"),
    healthy("h-6l-a", "h-6l-b", "a 6-layer model", model="tinylm-6l"),
    healthy("h-6l-b", "h-6l-a", "as h-6l-a, loader b", model="tinylm-6l", loader="b"),
    healthy(
        "h-gpus",
        "h-gpus-b",
        "four devices (H100, H100, A100, L20 by request hash), every one healthy",
        replicas=HEALTHY_GPUS,
    ),
    healthy("h-gpus-b", "h-gpus", "as h-gpus, loader b", replicas=HEALTHY_GPUS, loader="b"),
    healthy(
        "h-waves",
        "h-waves-b",
        "decoded in waves of 12 and of 4 (batch_id, batch_size per response)",
        waves=WAVES,
    ),
    healthy("h-waves-b", "h-waves", "as h-waves, loader b", waves=WAVES, loader="b"),
    healthy("h-long-a", "h-long-b", "12 steps", long=True),
    healthy("h-long-b", "h-long-a", "12 steps, loader b", long=True, loader="b"),
    healthy(
        "h-moe-a",
        "h-moe-b",
        "MoE (8 experts, top-2), natural routing: flips are normal",
        model="moe",
    ),
    healthy("h-moe-b", "h-moe-a", "as h-moe-a, loader b", model="moe", loader="b"),
    healthy(
        "h-moe-r3-a",
        "h-moe-r3-b",
        "MoE with routing replay, routes dumped correctly",
        model="moe",
        stream="h-moe-a",
        replay=True,
    ),
    healthy(
        "h-moe-r3-b",
        "h-moe-r3-a",
        "as h-moe-r3-a, loader b",
        model="moe",
        loader="b",
        stream="h-moe-b",
        replay=True,
    ),
)

IMPROVEMENTS: tuple[CalibRun, ...] = (
    improvement(
        "imp-fp16",
        "h-b",
        "fp16 weights and activations in the engine instead of bf16 (10 mantissa bits, not 7)",
        engine=EngineConfig(temperature=0.9, dtype=torch.float16),
    ),
    improvement(
        "imp-fp32-head",
        "h-b",
        "an fp32 lm_head in the engine",
        engine=EngineConfig(temperature=0.9, lm_head_fp32=True),
    ),
    improvement(
        "imp-fp32-kv",
        "h-b",
        "an fp32 KV cache and attention in the engine",
        engine=EngineConfig(temperature=0.9, kv_fp32=True),
    ),
    improvement(
        "imp-fp32-both",
        "h-b",
        "fp32 KV cache, attention and lm_head in the engine",
        engine=EngineConfig(temperature=0.9, kv_fp32=True, lm_head_fp32=True),
    ),
)
