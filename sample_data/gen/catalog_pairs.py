"""Combinations of two the calibration never saw: pairs of calibrated faults (and of the unseen
kinds, gen/catalog_unseen.py) that no corpus held when `diagnose`'s rules were chosen. They were
added after the rules of the third wave's sixteenth session and are diagnosed as they come; no
threshold or relation was set on them.

Each pairs two classes the first combinations did not pair (a re-rendered template beside stale
weights, the fault the first held-out check misnamed; raw logprobs beside an fp8 cache; a stop
token's 0.0 beside a split-KV path; ...), one of them subtle where the other would drown it."""

from __future__ import annotations

from dataclasses import replace

from gen.calib_spec import CalibRun
from gen.catalog_common import FP8_KV, SPLIT_OFF_BY_ONE, SPLIT_ROWSUM, path, proc
from gen.catalog_healthy import replicas
from gen.catalog_other import combo
from gen.engine import EngineConfig
from gen.faults import NumericPath

PAIRS: tuple[CalibRun, ...] = (
    combo(
        "pair-crlf-stale",
        "template+policy",
        "the trainer's tool responses ending in \\r\\n and rollout weights one optimizer step "
        "behind",
        render="crlf",
        weights="iter-lag",
    ),
    combo(
        "pair-raw-fp8kv",
        "semantics+precision",
        "raw logprobs at T 0.985 (subtle) and an fp8 (e4m3) KV cache in the engine",
        engine=EngineConfig(
            temperature=0.985, logprobs_mode="raw", path=NumericPath(kv_cache="e4m3")
        ),
    ),
    combo(
        "pair-rep-stale",
        "semantics+policy",
        "a repetition penalty of 1.3 in the engine only and rollout weights one optimizer step "
        "behind",
        engine=proc(repetition_penalty=1.3),
        weights="iter-lag",
    ),
    combo(
        "pair-prefix-fp8kv",
        "code_path+precision",
        "a prefix cache kept over the weight sync (4 of 8 GRPO groups reuse the previous "
        "checkpoint's prompt KV) and an fp8 (e4m3) KV cache",
        engine=path(prefix_cache=True, kv_cache="e4m3"),
        prefix_groups=4,
    ),
    combo(
        "pair-temp-gpu",
        "semantics+hardware",
        "the trainer without the engine's temperature (1.0 against 0.9) and the L20 replica's "
        "off-by-one split-KV merge",
        trainer_temperature=1.0,
        replicas=replicas(None, None, None, SPLIT_OFF_BY_ONE),
        baseline="h-gpus",
    ),
    combo(
        "pair-stopzero-splitkv",
        "stop+code_path",
        "the engine's logprob of each response's last token written as 0.0 and the split-KV "
        "combine that forgets the row sums (KV >= 192, batches under 16)",
        engine=SPLIT_ROWSUM,
        edit="zero-last",
    ),
    combo(
        "pair-chunk-crlf",
        "code_path+template",
        "chunked prefill (64) merged without the row sums and the trainer's tool responses "
        "ending in \\r\\n",
        engine=path(chunk=64, chunk_fault="merge"),
        render="crlf",
    ),
    combo(
        "pair-normeps-stale",
        "precision+policy",
        "the engine's LayerNorm epsilon 1e-2 (the trainer's 1e-5) and rollout weights one "
        "optimizer step behind",
        engine=path(norm_eps=1e-2),
        weights="iter-lag",
    ),
    combo(
        "pair-batchvar-temp",
        "code_path+semantics",
        "batch-variant split-K linear layers (48 // batch splits under 16) and the trainer at "
        "temperature 0.91 against the engine's 0.9",
        engine=path(batch_splits=48, batch_below=16, batch_drop_tail=True),
        trainer_temperature=0.91,
    ),
    combo(
        "pair-fp8kv-stale",
        "precision+policy",
        "an fp8 (e4m3) KV cache and rollout weights one checkpoint behind",
        engine=FP8_KV,
        weights="ckpt-lag",
    ),
    combo(
        "pair-pad-stale",
        "data+policy",
        "the writer stores each response's padding as model tokens and rollout weights one "
        "optimizer step behind",
        edit="pad-as-tokens",
        weights="iter-lag",
    ),
    combo(
        "pair-topk-splitkv-subtle",
        "semantics+code_path",
        "top-k 40 renormalised in the engine and the split-KV combine that forgets the row sums: "
        "both subtle",
        size="subtle",
        engine=replace(SPLIT_ROWSUM, processors=proc(top_k=40).processors),
    ),
)
