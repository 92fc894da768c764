"""The runs of the sample data: each changes one knob of the inference path against `ref`.

A run's knob is either in its `EngineConfig` or in one of the RunSpec fields below (weights,
loader, steps served by a faulty engine, trainer-side rendering). Tags are what a user of such a
stack would write: they never name a bug the user would not know about.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gen.engine import EngineConfig
from gen.model import AttentionKernel

TEMPERATURE = 0.9

# faulty-attn-subtle: flash-decoding style splits for long KV only (per sequence, KV >= 192) in
# decode batches of fewer than 16 sequences, with a combine that forgets each split's row sum
SUBTLE_KERNEL = AttentionKernel(
    split_kv=True, min_active_for_single_pass=16, min_kv_for_split=192, merge_drops_rowsum=True
)
# spiky-6: the faulty replica's kernel, split at every batch size and KV length
SPIKY_KERNEL = AttentionKernel(
    split_kv=True, min_active_for_single_pass=10**6, merge_drops_rowsum=True
)
SPIKY_STEPS = (3, 5)
STALE_ITERS = 1


def crlf_last_newline(text: bytes) -> bytes:
    """The trainer's rendering of a tool response: its final newline written as CRLF."""
    return text[:-1] + b"\r\n" if text.endswith(b"\n") else text


TOOL_RENDERS: dict[str, Callable[[bytes], bytes]] = {"crlf": crlf_last_newline}


@dataclass(frozen=True)
class RunSpec:
    name: str
    engine: EngineConfig
    shows: str
    fmt: str = "parquet-sequence"  # or "nemo-jsonl"
    weight_lag: int = 0  # rollout sampled with checkpoint step - lag
    tags: dict[str, str] = field(default_factory=dict)
    iter_lag: int = 0  # rollout sampled with the weights this many training iterations earlier
    loader: str = ""  # another seeded prompt loader: other prompts, turn counts and tool calls
    n_steps: int | None = None  # only the first n steps (default: every step of the size)
    fault_steps: tuple[int, ...] = ()  # steps whose rollouts are served by `fault_engine`
    fault_engine: EngineConfig | None = None
    tool_render: str = ""  # how the trainer's copy of each tool response differs (TOOL_RENDERS)
    # per-sequence `prompts` and `data_source` columns (the runs added after the first seven;
    # the first seven stay byte-for-byte as they were)
    prompt_columns: bool = False
    in_ci: bool = True  # part of --size ci


def base_tags(engine: EngineConfig, weight_lag: int) -> dict[str, str]:
    """Honest tags: the device is the CPU; the others name the inference side's numeric path."""
    kernel = engine.kernel
    if kernel.split_kv:
        attention = "split-kv-lse-merge-bug" if kernel.merge_bug else "split-kv"
    else:
        attention = "dense-kvcache-fp32" if engine.kv_fp32 else "dense-kvcache"
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

# Runs added later: written after the synthetic run, each with the per-sequence prompt columns.
ADDED_RUNS: tuple[RunSpec, ...] = (
    replace(
        _spec(
            "ref-b",
            EngineConfig(temperature=TEMPERATURE),
            "A second healthy run configured like ref, with another seeded prompt loader and "
            "sampling stream (other prompts and responses): the no-false-alarm baseline pair.",
        ),
        loader="b",
        prompt_columns=True,
    ),
    replace(
        _spec(
            "faulty-attn-subtle",
            EngineConfig(temperature=TEMPERATURE, kernel=SUBTLE_KERNEL),
            "Split-KV decode attention whose combine weights each split by its max alone "
            "(forgetting its row sum), taken only by sequences with KV length >= 192 in decode "
            "batches of fewer than 16: a small fault confined to long KV positions in some "
            "batches and steps.",
        ),
        prompt_columns=True,
        in_ci=False,
    ),
    replace(
        _spec(
            "stale-subtle",
            EngineConfig(temperature=TEMPERATURE),
            f"Rollouts sampled with the weights {STALE_ITERS} training iterations behind the "
            "trainer's (untagged: weight_lag=0, no weight_version column): a small policy "
            "difference spread over every position and turn (2-10x ref).",
        ),
        iter_lag=STALE_ITERS,
        prompt_columns=True,
        in_ci=False,
    ),
    replace(
        _spec(
            "spiky-6",
            EngineConfig(temperature=TEMPERATURE),
            f"Six steps; steps {', '.join(map(str, SPIKY_STEPS))} are served by a replica whose "
            "split-KV decode path (combine without the row sums) runs at every batch size and KV "
            "length (20-30x ref in those steps); the other steps are at ref level.",
        ),
        n_steps=6,
        fault_steps=SPIKY_STEPS,
        fault_engine=EngineConfig(temperature=TEMPERATURE, kernel=SPIKY_KERNEL),
        prompt_columns=True,
        in_ci=False,
    ),
    replace(
        _spec(
            "improved",
            EngineConfig(temperature=TEMPERATURE, kv_fp32=True, lm_head_fp32=True),
            "A benign improvement: fp32 KV cache and attention plus an fp32 lm_head on the "
            "inference side; vllm_kl below ref.",
        ),
        prompt_columns=True,
        in_ci=False,
    ),
    replace(
        _spec(
            "template-fault",
            EngineConfig(temperature=TEMPERATURE),
            "Chat-template fault: the trainer's copy of each tool response ends in \\r\\n where "
            "the engine saw \\n; the mismatch sits in the first tokens of each model turn after "
            "a tool response and decays with distance; first turns are untouched.",
        ),
        tool_render="crlf",
        prompt_columns=True,
        in_ci=False,
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
