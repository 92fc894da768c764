"""What one run of the calibration corpus is: its class, its one knob, and its sizes.

Every knob's default is the healthy stack: a `CalibRun` with only a name, a class and a baseline
is a healthy run of the dense model (bf16 KV-cache engine, fp32 trainer, temperature 0.9).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gen.engine import EngineConfig, TurnLimits
from gen.model import ModelConfig
from gen.moe import MoEConfig
from gen.rollout import RolloutShape
from gen.train import TrainConfig

TEMPERATURE = 0.9
KINDS = ("healthy", "improvement", "fault", "combo")
SIZES = ("subtle", "loud")
CONTEXT = 1024  # rotary tables for long multi-turn contexts (training context stays 320)


@dataclass(frozen=True)
class Replica:
    """One device of a multi-device run: its label and, if it departs, its own engine."""

    gpu: str
    engine: EngineConfig | None = None  # None: the run's engine


@dataclass(frozen=True)
class CalibRun:
    name: str
    kind: str
    cause: str | None  # the expected cause key; "a+b" for a combination; None when healthy
    fault: str  # one line: the physical fault (or the healthy setting)
    size: str | None  # subtle / loud for faults and combinations
    baseline: str  # a healthy run of the same model and stack with other rollouts
    model: str = "tinylm"  # a key of the size's models
    engine: EngineConfig = field(default_factory=lambda: EngineConfig(temperature=TEMPERATURE))
    trainer_temperature: float | None = None  # None: the engine's temperature
    trainer_dtype: str = "fp32"  # "bf16": the trainer's forward in bf16, its logits upcast
    shape: str = "default"  # a key of the size's shapes
    long: bool = False  # the size's long step count (growth runs and their baselines)
    loader: str = "a"  # the seeded prompt loader: prompts, turn counts, tool calls
    stream: str = ""  # the sampling stream ("": the run's name); equal streams share rollouts
    weights: str = "current"  # gen/calib_weights.py: what the engine serves at each step
    schedule: str = ""  # gen/calib_weights.py: an engine that changes with the step
    replicas: tuple[Replica, ...] = ()  # a multi-device run: requests spread by uid hash
    max_batch: int = 0  # the engine admits at most this many requests at once (0: all)
    # decoded in waves of these sizes: a step's requests split by uid hash into one group per
    # size (in proportion to it), each group served by an engine admitting that many at once;
    # each response labelled with its first turn's wave (batch_id) and that wave's size
    waves: tuple[int, ...] = ()
    prefix_groups: int = 0  # this many GRPO groups per step hit a stale prefix cache
    prefix_weights: str = "ckpt-lag"  # the weights the cached prompt KV was computed with
    render: str = ""  # gen/edits.py: the trainer's copy of each tool response re-rendered
    append_stop: bool = False  # the trainer scores a stop byte the engine never sampled
    edit: str = ""  # gen/edits.py: a writer bug applied to the scored samples
    replay: bool = False  # MoE: the trainer replays the engine's routes (R3)
    capture_bug: str = ""  # MoE: gen/routes.py capture bug of the trainer's dumped routes

    @property
    def sampling_stream(self) -> str:
        return self.stream or self.name

    def rollout_key(self) -> tuple[object, ...]:
        """What the rollouts depend on: runs with equal keys share their rollouts."""
        return (
            self.model,
            self.engine,
            self.shape,
            self.long,
            self.loader,
            self.sampling_stream,
            self.weights,
            self.schedule,
            self.replicas,
            self.max_batch,
            self.waves,
            self.prefix_groups,
            self.prefix_weights,
        )


@dataclass(frozen=True)
class ModelSpec:
    cfg: ModelConfig
    train: TrainConfig
    seed: int
    label: str  # corpus.json's `model`


@dataclass(frozen=True)
class CalibSize:
    models: dict[str, ModelSpec]
    shapes: dict[str, RolloutShape]
    steps: int
    long_steps: int
    runs: tuple[str, ...] = ()  # only these runs (empty: every run of the catalogue)


def shapes(n: int, g: int, limits: TurnLimits) -> dict[str, RolloutShape]:
    """The batch partitions and turn structures, around a default of n prompts x g responses."""
    return {
        "default": RolloutShape(n, g, limits=limits),
        "6x8": RolloutShape(max(2, n * 3 // 4), 2 * g, limits=limits),
        "16x2": RolloutShape(2 * n, max(1, g // 2), limits=limits),
        "12x4": RolloutShape(n * 3 // 2, g, limits=limits),
        "one-turn": RolloutShape(n, g, limits=TurnLimits(64, 16), min_turns=1, max_turns=1),
        "many-turns": RolloutShape(
            n, g, 24, 40, TurnLimits(24, 8), min_turns=4, max_turns=5, tool_echo=True
        ),
    }


def model_specs(warmup: int, per_step: int, steps: int, long_steps: int) -> dict[str, ModelSpec]:
    """The dense model (enough checkpoints for the long runs), the same model trained with
    another seed and a 6-layer model (both with a shorter warm-up: training is most of the
    corpus's cost), the MoE model, and three models of other shapes and seeds the faults are
    repeated on: a wider, shallower one (3 layers of width 256, 8 heads, seed 2), a deeper,
    narrower one (8 layers of width 64, 4 heads of 16, seed 3) and, made after the others were
    calibrated, one between them (5 layers of width 96, 3 heads of 32, seed 5)."""

    def cfg(warm: int, n_steps: int, batch: int = 16) -> TrainConfig:
        return TrainConfig(warm, per_step, n_steps + 1, batch=batch)

    return {
        "tinylm": ModelSpec(
            ModelConfig(max_len=CONTEXT), cfg(warmup, long_steps), 0, "tinylm-4x128"
        ),
        "tinylm-seed1": ModelSpec(
            ModelConfig(max_len=CONTEXT), cfg(warmup * 3 // 4, steps), 1, "tinylm-4x128-seed1"
        ),
        "tinylm-6l": ModelSpec(
            ModelConfig(n_layers=6, max_len=CONTEXT), cfg(warmup * 3 // 5, steps), 0, "tinylm-6x128"
        ),
        "moe": ModelSpec(
            MoEConfig(max_len=CONTEXT), cfg(warmup // 2, steps, 8), 0, "tinymoe-8e-top2"
        ),
        "tinylm-wide": ModelSpec(
            ModelConfig(d_model=256, n_layers=3, n_heads=8, d_ff=1024, max_len=CONTEXT),
            cfg(warmup * 3 // 5, steps),
            2,
            "tinylm-3x256",
        ),
        "tinylm-mid": ModelSpec(
            ModelConfig(d_model=96, n_layers=5, n_heads=3, d_ff=384, max_len=CONTEXT),
            cfg(warmup * 3 // 5, steps),
            5,
            "tinylm-5x96",
        ),
        "tinylm-deep": ModelSpec(
            ModelConfig(d_model=64, n_layers=8, n_heads=4, d_ff=256, max_len=CONTEXT),
            cfg(warmup * 3 // 5, steps),
            3,
            "tinylm-8x64",
        ),
    }


SMALL_LIMITS = TurnLimits(max_new=32, min_new=12)
CALIB_SIZES: dict[str, CalibSize] = {
    "small": CalibSize(model_specs(400, 10, 6, 12), shapes(8, 4, SMALL_LIMITS), 6, 12),
    "tiny": CalibSize(
        model_specs(40, 5, 2, 3),
        shapes(4, 4, TurnLimits(max_new=24, min_new=8)),
        2,
        3,
        runs=("h-a", "h-b", "sem-raw-loud", "pol-stale-ckpt"),
    ),
}
