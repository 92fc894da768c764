"""Fault runs of the calibration corpus in the engine's numbers: semantics (the engine reports
another distribution than the trainer scores), the policy (the weights the engine serves), a code
path (a kernel or cache that departs in some batches, positions or requests) and precision.

Trainer-side faults reuse h-a's rollouts (`stream="h-a"`) and are compared with h-b; engine-side
faults sample their own rollouts and are compared with h-b too.
"""

from __future__ import annotations

from typing import Any

import torch

from gen.calib_spec import TEMPERATURE, CalibRun
from gen.engine import EngineConfig
from gen.faults import NumericPath
from gen.model import AttentionKernel
from gen.sampling import Processors


def fault(cause: str, size: str | None, name: str, what: str, **knobs: Any) -> CalibRun:
    return CalibRun(name, "fault", cause, what, size, knobs.pop("baseline", "h-b"), **knobs)


def proc(temperature: float = TEMPERATURE, **kw: Any) -> EngineConfig:
    return EngineConfig(temperature=temperature, processors=Processors(**kw))


def path(**kw: Any) -> EngineConfig:
    return EngineConfig(temperature=TEMPERATURE, path=NumericPath(**kw))


def kernel(**kw: Any) -> EngineConfig:
    return EngineConfig(temperature=TEMPERATURE, kernel=AttentionKernel(split_kv=True, **kw))


# bytes the model emits often: space, 'e', '_', '('
BIASED = ((32, 1.5), (101, 1.5), (95, 1.5), (40, 1.5))
SLIGHTLY_BIASED = ((32, 0.25), (101, 0.25), (95, 0.25), (40, 0.25))
# a bad-words list: '#' (comments) and the digits 0-3
BANNED = (35, 48, 49, 50, 51)
# the split-KV faults: flash-decoding splits of 64 in small decode batches
SPLIT_ROWSUM = kernel(min_active_for_single_pass=16, min_kv_for_split=160, merge_drops_rowsum=True)
SPLIT_OFF_BY_ONE = kernel(min_active_for_single_pass=10, merge_bug=True)

SEMANTICS: tuple[CalibRun, ...] = (
    fault(
        "semantics",
        "loud",
        "sem-raw-loud",
        "engine returns raw logprobs (before temperature 0.7); the trainer applies it",
        engine=EngineConfig(temperature=0.7, logprobs_mode="raw"),
    ),
    fault(
        "semantics",
        "subtle",
        "sem-raw-subtle",
        "engine returns raw logprobs (before temperature 0.97); the trainer applies it",
        engine=EngineConfig(temperature=0.97, logprobs_mode="raw"),
    ),
    fault(
        "semantics",
        "subtle",
        "sem-temp-subtle",
        "engine samples at temperature 0.9, the trainer scores at 0.95",
        stream="h-a",
        trainer_temperature=0.95,
    ),
    fault(
        "semantics",
        "loud",
        "sem-temp-loud",
        "engine samples at temperature 0.9, the trainer scores without it (1.0)",
        stream="h-a",
        trainer_temperature=1.0,
    ),
    fault(
        "semantics",
        "subtle",
        "sem-topp-subtle",
        "engine samples top-p 0.95 and reports the renormalised logprobs",
        engine=EngineConfig(temperature=0.9, top_p=0.95),
    ),
    fault(
        "semantics",
        "loud",
        "sem-topp-loud",
        "engine samples top-p 0.8 and reports the renormalised logprobs",
        engine=EngineConfig(temperature=0.9, top_p=0.8),
    ),
    fault(
        "semantics",
        "subtle",
        "sem-topk-subtle",
        "engine samples top-k 50, renormalised",
        engine=proc(top_k=50),
    ),
    fault(
        "semantics",
        "loud",
        "sem-topk-loud",
        "engine samples top-k 8, renormalised",
        engine=proc(top_k=8),
    ),
    fault(
        "semantics",
        "subtle",
        "sem-minp-subtle",
        "engine samples min-p 0.02, renormalised",
        engine=proc(min_p=0.02),
    ),
    fault(
        "semantics",
        "loud",
        "sem-minp-loud",
        "engine samples min-p 0.1, renormalised",
        engine=proc(min_p=0.1),
    ),
    fault(
        "semantics",
        "subtle",
        "sem-rep-subtle",
        "repetition penalty 1.05 in the engine's processed logprobs only",
        engine=proc(repetition_penalty=1.05),
    ),
    fault(
        "semantics",
        "loud",
        "sem-rep-loud",
        "repetition penalty 1.3 in the engine's processed logprobs only",
        engine=proc(repetition_penalty=1.3),
    ),
    fault(
        "semantics",
        "subtle",
        "sem-freq-subtle",
        "frequency penalty 0.05 in the engine only",
        engine=proc(frequency_penalty=0.05),
    ),
    fault(
        "semantics",
        "loud",
        "sem-presence-loud",
        "presence penalty 0.5 in the engine only",
        engine=proc(presence_penalty=0.5),
    ),
    fault(
        "semantics",
        "subtle",
        "sem-bias-subtle",
        "logit bias +0.25 on 4 byte ids in the engine only",
        engine=proc(logit_bias=SLIGHTLY_BIASED),
    ),
    fault(
        "semantics",
        "loud",
        "sem-bias-loud",
        "logit bias +1.5 on 4 byte ids in the engine only",
        engine=proc(logit_bias=BIASED),
    ),
    fault(
        "semantics",
        "subtle",
        "sem-badwords",
        "a bad-words mask ('#', digits 0-3) in the engine only",
        engine=proc(bad_ids=BANNED),
    ),
)

POLICY: tuple[CalibRun, ...] = (
    fault(
        "policy",
        "subtle",
        "pol-stale-iter",
        "rollout weights one optimizer step behind",
        weights="iter-lag",
    ),
    fault(
        "policy",
        "loud",
        "pol-stale-ckpt",
        "rollout weights one checkpoint (10 optimizer steps) behind",
        weights="ckpt-lag",
    ),
    fault(
        "policy",
        "subtle",
        "pol-partial-layer-iter",
        "partial sync: layer 1 one optimizer step behind, the rest current",
        weights="layer1-iter-lag",
    ),
    fault(
        "policy",
        "loud",
        "pol-partial-layer",
        "partial sync: layer 1 one checkpoint behind",
        weights="layer1-ckpt-lag",
    ),
    fault(
        "policy",
        "loud",
        "pol-partial-embed",
        "partial sync: the embeddings one checkpoint behind",
        weights="embed-ckpt-lag",
    ),
    fault(
        "policy",
        "loud",
        "pol-partial-head",
        "partial sync: the lm_head one checkpoint behind",
        weights="head-ckpt-lag",
    ),
    fault(
        "policy",
        "loud",
        "pol-wrong-ckpt",
        "the engine serves another training run's checkpoint (seed 1)",
        weights="wrong-checkpoint",
    ),
    fault(
        "policy",
        "loud",
        "pol-reload-jump",
        "from the middle step on, layer 2 keeps the "
        "weights of the step before (a broken reload); normal before",
        weights="reload-jump",
    ),
)

CODE_PATH: tuple[CalibRun, ...] = (
    fault(
        "code_path",
        "subtle",
        "cp-splitkv-subtle",
        "split-KV decode (splits of 64) whose "
        "combine forgets the row sums, for KV >= 160 in decode batches under 16",
        engine=SPLIT_ROWSUM,
    ),
    fault(
        "code_path",
        "loud",
        "cp-splitkv-loud",
        "split-KV decode with an off-by-one LSE merge in decode batches under 10",
        engine=SPLIT_OFF_BY_ONE,
    ),
    fault(
        "code_path",
        "subtle",
        "cp-decode-rope",
        "decode path only: rotary angles computed in bf16 (position x frequency)",
        engine=path(decode_rope="bf16"),
    ),
    fault(
        "code_path",
        "loud",
        "cp-decode-shift",
        "decode path only: rotary position off by one",
        engine=path(decode_rope="shift"),
    ),
    fault(
        "code_path",
        "subtle",
        "cp-prefill-pad",
        "the prefill's last position also attends to one left-padding slot",
        engine=path(prefill_last="pad_key"),
    ),
    fault(
        "code_path",
        "loud",
        "cp-prefill-self",
        "the prefill's last position does not attend to itself",
        engine=path(prefill_last="no_self"),
    ),
    fault(
        "code_path",
        "subtle",
        "cp-chunk-fp8",
        "chunked prefill (64): the earlier chunks' KV written and read back in fp8",
        engine=path(chunk=64, chunk_fault="fp8"),
    ),
    fault(
        "code_path",
        "loud",
        "cp-chunk-merge",
        "chunked prefill (64): earlier chunks and the current one merged without their row sums",
        engine=path(chunk=64, chunk_fault="merge"),
    ),
    fault(
        "code_path",
        "subtle",
        "cp-prefix-subtle",
        "prefix cache kept over the weight sync: "
        "half the GRPO groups reuse prompt KV one optimizer step old",
        engine=path(prefix_cache=True),
        prefix_groups=4,
        prefix_weights="iter-lag",
    ),
    fault(
        "code_path",
        "loud",
        "cp-prefix-loud",
        "prefix cache kept over the weight sync: half "
        "the GRPO groups reuse prompt KV one checkpoint old",
        engine=path(prefix_cache=True),
        prefix_groups=4,
    ),
    fault(
        "code_path",
        "subtle",
        "cp-batchvar-subtle",
        "batch-variant linear layers: decode "
        "batches under 8 use split-K (16 / batch splits) summed in bf16",
        engine=path(batch_splits=16, batch_below=8),
    ),
    fault(
        "code_path",
        "loud",
        "cp-batchvar-loud",
        "batch-variant linear layers: decode "
        "batches under 16 use split-K (256 / batch splits) summed in bf16",
        engine=path(batch_splits=256, batch_below=16),
    ),
    fault(
        "code_path",
        "subtle",
        "cp-tp2",
        "tensor parallel 2: row-parallel partial sums added in bf16",
        engine=path(tp=2),
    ),
    fault(
        "code_path",
        "subtle",
        "cp-tp4",
        "tensor parallel 4: row-parallel partial sums added in bf16",
        engine=path(tp=4),
    ),
)

PRECISION: tuple[CalibRun, ...] = (
    fault(
        "precision",
        "subtle",
        "pr-fp8kv-v",
        "fp8 (e4m3, scale 1) V cache",
        engine=path(kv_cache="e4m3", kv_cache_values_only=True),
    ),
    fault(
        "precision",
        "loud",
        "pr-fp8kv",
        "fp8 (e4m3, scale 1) KV cache",
        engine=path(kv_cache="e4m3"),
    ),
    fault(
        "precision", "loud", "pr-fp8kv-e5m2", "fp8 (e5m2) KV cache", engine=path(kv_cache="e5m2")
    ),
    fault(
        "precision",
        "subtle",
        "pr-head-bf16acc",
        "lm_head as split-K 16 summed in bf16",
        engine=path(lm_head="bf16acc"),
    ),
    fault("precision", "loud", "pr-head-fp8", "W8A8 e4m3 lm_head", engine=path(lm_head="fp8")),
    fault(
        "precision",
        "loud",
        "pr-weights-fp8",
        "every linear layer's weights in e4m3 (per-channel scale)",
        engine=path(weights_fp8=True),
    ),
    fault(
        "precision",
        None,
        "pr-fp16",
        "fp16 weights and activations instead of bf16",
        engine=EngineConfig(temperature=TEMPERATURE, dtype=torch.float16),
    ),
)
