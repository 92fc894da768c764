"""The mixture-of-experts runs: one MoE model, one set of rollouts per step, three dumps.

Every step is rolled out once by the bf16 engine (routes recorded per input position) and scored
twice by the fp32 trainer: with its own routing (`moe`) and with the engine's routes replayed
(`moe-r3`, `moe-capture-bug`). The three runs share their tokens and rollout logprobs, so
comparing them isolates what routing replay changes; `moe-capture-bug` is `moe-r3` with the
trainer's routes dumped one position late.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

from gen.engine import EngineConfig, InferenceEngine, TrainerScorer
from gen.moe import MoEConfig
from gen.rollout import RolloutShape, Sample, make_samples, roll_out, score, stable_seed
from gen.runs import TEMPERATURE, base_tags
from gen.train import TrainConfig, Trained

MOE_MODEL = "tinymoe-8e-top2"


@dataclass(frozen=True)
class MoESize:
    """The MoE runs' share of a --size: training, batch shape and steps."""

    train: TrainConfig
    shape: RolloutShape
    n_steps: int


@dataclass(frozen=True)
class MoERunSpec:
    name: str
    shows: str
    encoding: str  # gen/routes.py: lists, sglang or prime
    replay: bool  # the trainer uses the engine's routes (R3)
    capture_bug: str = ""  # gen/routes.py: "shift"
    tags: dict[str, str] = field(default_factory=dict)

    def ingest_options(self, cfg: MoEConfig) -> dict[str, object]:
        """What `mismatchctl ingest` needs beyond the file (manifest key `ingest`)."""
        return {"routes_topk": cfg.top_k, "num_experts": cfg.n_experts}


def moe_tags(replay: bool) -> dict[str, str]:
    """The dense runs' tags for the MoE model's two paths, and whether replay is on."""
    tags = base_tags(EngineConfig(temperature=TEMPERATURE), 0)
    tags |= {
        "engine": "tinymoe-bf16-kvcache",
        "trainer": "tinymoe-fp32-full-forward",
        "model": MOE_MODEL,
        "routing_replay": "r3" if replay else "off",
    }
    return tags


MOE_RUNS: tuple[MoERunSpec, ...] = (
    MoERunSpec(
        "moe",
        "MoE model (8 experts, top-2), natural routing: the bf16 engine and the fp32 trainer "
        "choose their experts independently, so some positions route differently (real flips "
        "of near-tied router logits); routes of both sides as verl-style lists.",
        "lists",
        replay=False,
        tags=moe_tags(False),
    ),
    MoERunSpec(
        "moe-r3",
        "The same rollouts with rollout routing replay (R3): the trainer uses the engine's "
        "routes, so both sides' routes agree everywhere and the mismatch drops; routes as "
        "SGLang base64 with routed_experts_start_len.",
        "sglang",
        replay=True,
        tags=moe_tags(True),
    ),
    MoERunSpec(
        "moe-capture-bug",
        "moe-r3's data with a capture bug: the trainer's routes are dumped one position late "
        "(aligned per output position), so replay looks violated though the logprobs are "
        "moe-r3's; routes as prime-rl {data, shape, dtype} bytes.",
        "prime",
        replay=True,
        capture_bug="shift",
        tags=moe_tags(True),
    ),
)


def moe_step(
    cfg: MoEConfig,
    trained: Trained,
    shape: RolloutShape,
    lines: list[bytes],
    sources: list[str],
    seed: int,
    step: int,
) -> tuple[list[Sample], list[Sample]]:
    """One step's rollouts scored twice: with the trainer's own routing, and with replay."""
    state = trained.checkpoints[step]
    engine = InferenceEngine(cfg, state, EngineConfig(temperature=TEMPERATURE))
    samples = make_samples(shape, lines, step, seed, sources)
    gen = torch.Generator().manual_seed(stable_seed(seed, "sampling", "moe", step))
    roll_out(engine, samples, shape.limits, gen)
    scorer = TrainerScorer(cfg, state, TEMPERATURE)
    natural = [copy.copy(s) for s in samples]
    score(scorer, natural)
    replayed = [copy.copy(s) for s in samples]
    score(scorer, replayed, replay=True)
    return natural, replayed
