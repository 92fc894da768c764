"""The runs of the sample data: each changes one knob of the inference path against `ref`."""

from __future__ import annotations

from dataclasses import dataclass, field

from gen.engine import EngineConfig
from gen.model import AttentionKernel

TEMPERATURE = 0.9


@dataclass(frozen=True)
class RunSpec:
    name: str
    engine: EngineConfig
    shows: str
    fmt: str = "parquet-sequence"  # or "nemo-jsonl"
    weight_lag: int = 0  # rollout sampled with checkpoint step - lag
    tags: dict[str, str] = field(default_factory=dict)


def base_tags(engine: EngineConfig, weight_lag: int) -> dict[str, str]:
    """Honest tags: the device is the CPU; the others name the inference side's numeric path."""
    kernel = engine.kernel
    if kernel.split_kv:
        attention = "split-kv-lse-merge-bug" if kernel.merge_bug else "split-kv"
    else:
        attention = "dense-kvcache"
    return {
        "gpu": "cpu",
        "engine": "tinylm-bf16-kvcache",
        "trainer": "tinylm-fp32-full-forward",
        "dtype": "bf16",
        "logprobs_mode": f"{engine.logprobs_mode}_logprobs",
        "attention": attention,
        "lm_head": "fp32" if engine.lm_head_fp32 else "bf16",
        "temperature": str(engine.temperature),
        "top_p": str(engine.top_p),
        "weight_lag": str(weight_lag),
        "source": "captured",
    }


def _spec(
    name: str, engine: EngineConfig, shows: str, fmt: str = "parquet-sequence", lag: int = 0
) -> RunSpec:
    return RunSpec(name, engine, shows, fmt, lag, base_tags(engine, lag))


RUNS: tuple[RunSpec, ...] = (
    _spec(
        "ref",
        EngineConfig(temperature=TEMPERATURE),
        "Reference: bf16 KV-cache inference vs fp32 trainer; small mismatch concentrated in "
        "low-probability tokens and in turns after a tool response.",
    ),
    _spec(
        "raw-logprobs",
        EngineConfig(temperature=TEMPERATURE, logprobs_mode="raw"),
        "Semantic bug: the engine returns raw logprobs (before temperature) while the trainer "
        "applies it, visible as a clear mean offset of the log ratio.",
    ),
    _spec(
        "stale-weights",
        EngineConfig(temperature=TEMPERATURE),
        "Rollouts sampled with the previous checkpoint (weight_version = step - 1) and scored "
        "with the current one: a larger, policy-shaped mismatch.",
        lag=1,
    ),
    _spec(
        "faulty-attn",
        EngineConfig(
            temperature=TEMPERATURE,
            kernel=AttentionKernel(split_kv=True, merge_bug=True),
        ),
        "Split-KV decode attention with a wrong log-sum-exp merge, used only when few sequences "
        "are active: only some batches and tokens are hit, with large spikes.",
    ),
    _spec(
        "fp32-head",
        EngineConfig(temperature=TEMPERATURE, lm_head_fp32=True),
        "Like ref with an fp32 lm_head on the inference side, stored as NeMo-RL JSONL.",
        fmt="nemo-jsonl",
    ),
    _spec(
        "top-p",
        EngineConfig(temperature=TEMPERATURE, top_p=0.9),
        "Inference samples from the top-p = 0.9 nucleus and reports renormalised logprobs; the "
        "trainer scores the full distribution, so the mean ratio is about the kept mass.",
    ),
)

SYNTHETIC_TAGS: dict[str, str] = {
    "source": "synthetic",
    "engine": "synthetic-from-ref",
    "logprobs_mode": "processed_logprobs",
    "temperature": str(TEMPERATURE),
    "top_p": "1.0",
}
SYNTHETIC_SHOWS = (
    "Synthetic, labelled: ref's real rollouts with trainer logprobs drawn per GPU so vllm_kl "
    "matches published H20 / L20 / A100 magnitudes (A100 drifting up)."
)
