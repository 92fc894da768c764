"""Faults from a step on that no rule was set on: an engine restarted at the middle step with
another setting (``gen/calib_weights.restarted``), made after ``causes/whole_steps.py`` to test
what it risks: some steps hot throughout their responses are named other weights, and an engine
that changes its arithmetic or its sampling at a step could be hot throughout those steps too.

The class each is planted as is the fault's own: an fp8 KV cache, fp8 weights or a bf16
lm_head accumulator from a step on are **precision**, a faulty kernel that every token of those
steps takes is a **code path** (a replica's kernel: the engine computes another function there),
top-p from a step on is **semantics**; ``un-fp8kv-splitkv-restart`` puts the faulty kernel
beside an fp8 KV cache at every step (a precision loss whose level varies from step to step
only through a path: what ``varying_level.py`` risks); ``un-topp-reload`` and
``un-fp8kv-reload`` put a reload gone wrong at mid-run beside top-p and beside an fp8 cache
(other weights at some steps beside a cause of every token). ``un-lag-restart`` (the whole
model an optimizer step behind from the middle step on) and ``un-head-lag-restart`` (the lm_head
a checkpoint behind from there) are **policy** at some steps, made after ``step_change``'s run
share, to measure the drift within the hot steps that tells the weights from the arithmetic
(``step_change.WITHIN_DRIFT``). What a user should be told is that
the engine changed at that step; docs/diagnose.md "Faults at some steps" says what the data
tell of each.
"""

from __future__ import annotations

from gen.calib_spec import CalibRun
from gen.catalog_common import FP8_KV, fault
from gen.catalog_other import combo
from gen.engine import EngineConfig

S, L = "subtle", "loud"

RESTART: tuple[CalibRun, ...] = (
    fault(
        "precision",
        L,
        "un-fp8kv-restart",
        "from the middle step on the engine runs an fp8 (e4m3) KV cache (restarted with another "
        "kv-cache dtype); bf16 before",
        schedule="fp8kv-restart",
    ),
    fault(
        "precision",
        L,
        "un-weights-fp8-restart",
        "from the middle step on the engine serves every linear layer's weights in e4m3 (a "
        "quantized checkpoint loaded at a restart); bf16 before",
        schedule="weights-fp8-restart",
    ),
    fault(
        "precision",
        L,
        "un-fp8kv-e5m2-restart",
        "from the middle step on the engine runs an fp8 (e5m2) KV cache; bf16 before",
        schedule="fp8kv-e5m2-restart",
    ),
    fault(
        "precision",
        L,
        "un-head-bf16acc-restart",
        "from the middle step on the engine's lm_head sums 16 split-K partials in bf16; fp32 "
        "accumulation before",
        schedule="head-bf16acc-restart",
    ),
    fault(
        "code_path",
        L,
        "un-splitkv-restart",
        "from the middle step on the engine's split-KV decode (a combine that forgets the row "
        "sums) runs at every batch size and KV length (a faulty replica's kernel, as the sample "
        "data's spiky-6); the plain kernel before",
        schedule="splitkv-restart",
    ),
    fault(
        "code_path",
        L,
        "un-batchvar-restart",
        "from the middle step on every decode batch takes batch-variant split-K linear layers "
        "(32 // batch splits, the K tail unread); the plain layers before",
        schedule="batchvar-restart",
    ),
    fault(
        "semantics",
        L,
        "un-topp-restart",
        "from the middle step on the engine samples with top-p 0.9 and returns the renormalised "
        "logprobs; no truncation before",
        schedule="topp-restart",
    ),
    fault(
        "policy",
        S,
        "un-lag-restart",
        "from the middle step on the engine serves weights one optimizer step behind (an "
        "asynchronous rollout turned on at a restart); current weights before",
        weights="lag-restart",
    ),
    fault(
        "policy",
        S,
        "un-head-lag-restart",
        "from the middle step on the lm_head is one checkpoint behind (a restart whose weight "
        "sync skips the head); every parameter current before",
        weights="head-lag-restart",
    ),
    combo(
        "un-fp8kv-splitkv-restart",
        "precision+code_path",
        "an fp8 (e4m3) KV cache at every step, and from the middle step on the faulty split-KV "
        "combine at every batch size and KV length (a replica's kernel beside a precision loss)",
        engine=FP8_KV,
        schedule="splitkv-restart",
    ),
    combo(
        "un-topp-reload",
        "semantics+policy",
        "top-p 0.98 renormalised in the engine at every step, and from the middle step on layer 2 "
        "keeps the weights of the step before (a broken reload)",
        engine=EngineConfig(temperature=0.9, top_p=0.98),
        weights="reload-jump",
    ),
    combo(
        "un-fp8kv-reload",
        "precision+policy",
        "an fp8 (e4m3) KV cache at every step, and from the middle step on layer 2 keeps the "
        "weights of the step before (a broken reload)",
        engine=FP8_KV,
        weights="reload-jump",
    ),
)
