"""Fault runs in the engine's arithmetic: a code path (a kernel or cache that departs in some
batches, positions, requests or chunks) and precision. Sizes as in gen/catalog_semantics.py; the
tensor-parallel runs and the fp16 engine measured at the healthy level or below (see README)."""

from __future__ import annotations

from gen.calib_spec import CalibRun
from gen.catalog_common import FP8_KV, SPLIT_OFF_BY_ONE, SPLIT_ROWSUM, WAVES, fault, path

S, L = "subtle", "loud"


def code(size: str | None, name: str, what: str, **knobs: object) -> CalibRun:
    return fault("code_path", size, name, what, **knobs)


def prec(size: str, name: str, what: str, **knobs: object) -> CalibRun:
    return fault("precision", size, name, what, **knobs)


CODE_PATH: tuple[CalibRun, ...] = (
    code(
        S,
        "cp-splitkv-subtle",
        "split-KV decode whose combine forgets the row sums, for KV "
        ">= 192 in decode batches under 16",
        engine=SPLIT_ROWSUM,
    ),
    code(
        L,
        "cp-splitkv-loud",
        "split-KV decode with an off-by-one LSE merge in decode batches under 10",
        engine=SPLIT_OFF_BY_ONE,
    ),
    code(
        L,
        "cp-decode-rope",
        "decode path only: rotary angles (position x frequency) in bf16",
        engine=path(decode_rope="bf16"),
    ),
    code(
        L,
        "cp-prefill-pad",
        "the prefill's last position ignores the padding mask (sees the left-padding slots)",
        engine=path(prefill_last="pad_all"),
    ),
    code(
        L,
        "cp-prefill-self",
        "the prefill's last position does not attend to itself",
        engine=path(prefill_last="no_self"),
    ),
    code(
        S,
        "cp-chunk-merge",
        "chunked prefill (64): the earlier chunks' and the current "
        "chunk's attention merged without their row sums",
        engine=path(chunk=64, chunk_fault="merge"),
    ),
    code(
        L,
        "cp-chunk-swap",
        "chunked prefill (64): the merge swaps the two parts' log-sum-exps",
        engine=path(chunk=64, chunk_fault="swap"),
    ),
    code(
        S,
        "cp-prefix-subtle",
        "prefix cache kept over the weight sync: 4 of 8 GRPO groups "
        "reuse prompt KV of the previous checkpoint",
        engine=path(prefix_cache=True),
        prefix_groups=4,
    ),
    code(
        L,
        "cp-prefix-loud",
        "prefix cache kept over 3 weight syncs: 6 of 8 GRPO groups reuse "
        "prompt KV 3 checkpoints old",
        engine=path(prefix_cache=True),
        prefix_groups=6,
        prefix_weights="ckpt-lag-3",
    ),
    code(
        S,
        "cp-batchvar-subtle",
        "batch-variant split-K linear layers: decode batches under 16 "
        "take 32 // batch splits, the K tail left unread when they do not divide K",
        engine=path(batch_splits=32, batch_below=16, batch_drop_tail=True),
    ),
    code(
        L,
        "cp-batchvar-loud",
        "as cp-batchvar-subtle with 48 // batch splits",
        engine=path(batch_splits=48, batch_below=16, batch_drop_tail=True),
    ),
    code(
        L,
        "cp-batchvar-waves-32",
        "cp-batchvar-subtle's engine (32 // batch splits, the K tail unread) decoding in waves "
        "of 12 and of 4 (batch_id, batch_size per response): every decode batch is under 16, "
        "so every token takes the split path, 2 splits in the waves of 12, 8 in those of 4",
        engine=path(batch_splits=32, batch_below=16, batch_drop_tail=True),
        waves=WAVES,
        baseline="h-waves-b",
    ),
    code(
        L,
        "cp-batchvar-waves-48",
        "cp-batchvar-loud's engine (48 // batch splits) decoding in waves of 12 and of 4: 4 "
        "splits in the waves of 12, 12 in those of 4",
        engine=path(batch_splits=48, batch_below=16, batch_drop_tail=True),
        waves=WAVES,
        baseline="h-waves-b",
    ),
    code(
        None,
        "cp-tp4",
        "tensor parallel 4: row-parallel partial sums added in bf16",
        engine=path(tp=4),
    ),
)

PRECISION: tuple[CalibRun, ...] = (
    prec(
        S,
        "pr-fp8kv-v",
        "fp8 (e4m3, scale 1) V cache",
        engine=path(kv_cache="e4m3", kv_cache_values_only=True),
    ),
    prec(L, "pr-fp8kv", "fp8 (e4m3, scale 1) KV cache", engine=FP8_KV),
    prec(L, "pr-fp8kv-e5m2", "fp8 (e5m2, scale 1) KV cache", engine=path(kv_cache="e5m2")),
    prec(
        S, "pr-head-bf16acc", "lm_head as split-K 16 summed in bf16", engine=path(lm_head="bf16acc")
    ),
    prec(L, "pr-head-fp8", "W8A8 e4m3 lm_head", engine=path(lm_head="fp8")),
    prec(
        L,
        "pr-weights-fp8",
        "every linear layer's weights in e4m3 (per-channel scale)",
        engine=path(weights_fp8=True),
    ),
)
