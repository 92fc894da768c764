"""Fault runs of the calibration corpus outside the engine's arithmetic, and their combinations:
one device's replica (hardware), the trainer's rendering of the conversation (template), the
stop token (stop), writer bugs (data), MoE routing and its capture, growth over the steps."""

from __future__ import annotations

from dataclasses import replace

from gen.calib_spec import CalibRun
from gen.catalog_common import FP8_KV, SPLIT_OFF_BY_ONE, SPLIT_ROWSUM, fault
from gen.catalog_healthy import replicas
from gen.engine import EngineConfig
from gen.faults import NumericPath

HARDWARE: tuple[CalibRun, ...] = (
    fault(
        "hardware",
        "subtle",
        "hw-l20-splitkv-subtle",
        "four devices; the L20 replica takes "
        "the split-KV decode path that forgets row sums (KV >= 192, batches under 16)",
        replicas=replicas(None, None, None, SPLIT_ROWSUM),
        baseline="h-gpus",
    ),
    fault(
        "hardware",
        "loud",
        "hw-l20-splitkv-loud",
        "four devices; the L20 replica's split-KV "
        "decode merges with an off-by-one LSE (batches under 10)",
        replicas=replicas(None, None, None, SPLIT_OFF_BY_ONE),
        baseline="h-gpus",
    ),
    fault(
        "hardware",
        "subtle",
        "hw-a100-fp8kv",
        "four devices; the A100 replica runs an fp8 (e4m3) KV cache",
        replicas=replicas(None, None, FP8_KV, None),
        baseline="h-gpus",
    ),
)

TEMPLATE_STOP_DATA: tuple[CalibRun, ...] = (
    fault(
        "template",
        "loud",
        "tpl-crlf",
        "the trainer's copy of each tool response ends in \\r\\n where the engine saw \\n",
        stream="h-a",
        render="crlf",
    ),
    fault(
        "template",
        "loud",
        "tpl-strip-newline",
        "the trainer's copy of each tool response lacks its final newline",
        stream="h-a",
        render="strip-newline",
    ),
    fault(
        "template",
        "loud",
        "tpl-wrapper",
        "the trainer wraps tool output in <output> tags, the engine saw <python_output>",
        stream="h-a",
        render="wrapper",
    ),
    fault(
        "template",
        "loud",
        "tpl-escaped-quotes",
        "the trainer's template HTML-escapes the quotes of the tool output (&#39;): only the "
        "tool responses that hold a string differ",
        stream="h-a",
        render="escaped-quotes",
    ),
    fault(
        "stop",
        "loud",
        "stop-zero-last",
        "the engine's logprob of each response's last token written as 0.0",
        stream="h-a",
        edit="zero-last",
    ),
    fault(
        "stop",
        "loud",
        "stop-zero-stop",
        "the engine's logprob of the stop it sampled (a last turn ended at the stop byte) "
        "written as 0.0; responses cut at the length limit keep theirs",
        stream="h-a",
        edit="zero-stop",
    ),
    fault(
        "stop",
        "loud",
        "stop-zero-turn-ends",
        "the engine's logprob of every turn's last token written as 0.0",
        stream="h-a",
        edit="zero-turn-ends",
    ),
    fault(
        "stop",
        "loud",
        "stop-unsampled",
        "the trainer scores a stop byte appended to "
        "responses cut at the length limit, which the engine never sampled (0.0)",
        stream="h-a",
        append_stop=True,
    ),
    fault(
        "data",
        "loud",
        "data-shift",
        "the trainer's logprobs written one position early",
        stream="h-a",
        edit="shift-trainer",
    ),
    fault(
        "data",
        None,
        "data-padding",
        "right padding counted as model tokens (0.0 on both sides)",
        stream="h-a",
        edit="pad-as-tokens",
    ),
    fault(
        "data",
        "loud",
        "data-sentinel",
        "the rollout values lag the mask at tool-to-model "
        "edges: -9999 fills on the first token of each later turn",
        stream="h-a",
        edit="sentinel",
    ),
    fault(
        "data",
        None,
        "data-duplicate",
        "each step's first GRPO group written twice",
        stream="h-a",
        edit="duplicate",
    ),
)

ROUTING: tuple[CalibRun, ...] = (
    fault(
        "routing",
        "subtle",
        "moe-router-fp8",
        "MoE engine's router logits rounded to fp8 (e4m3): more routing flips",
        model="moe",
        baseline="h-moe-b",
        engine=EngineConfig(temperature=0.9, path=NumericPath(router="e4m3")),
    ),
    fault(
        "routing",
        "loud",
        "moe-router-e5m2",
        "MoE engine's router logits rounded to fp8 (e5m2): many routing flips",
        model="moe",
        baseline="h-moe-b",
        engine=EngineConfig(temperature=0.9, path=NumericPath(router="e5m2")),
    ),
    fault(
        "routing_capture",
        None,
        "moe-capture-shift",
        "MoE with replay; the trainer's routes "
        "dumped one position late (the logprobs are replay's)",
        model="moe",
        stream="h-moe-a",
        replay=True,
        capture_bug="shift",
        baseline="h-moe-r3-b",
    ),
)

GROWTH: tuple[CalibRun, ...] = (
    fault(
        "growth",
        "subtle",
        "gr-rate",
        "rate: the split-KV fault's KV threshold falls from 320 "
        "to 64 over 12 steps, so its share of tokens rises",
        long=True,
        schedule="splitkv-falling",
        baseline="h-long-b",
    ),
    fault(
        "growth",
        "subtle",
        "gr-rate-batch",
        "rate: the split-KV fault (KV >= 64) taken by decode batches under a size that rises "
        "from 2 to 32 over 12 steps, so its share of tokens rises step by step",
        long=True,
        schedule="splitkv-spreading",
        baseline="h-long-b",
    ),
    fault(
        "growth",
        "subtle",
        "gr-mix",
        "mix: healthy numerics, the responses take ever more tool turns (1 at the first step, 5 "
        "at the last): more tokens in later turns and at long KV positions",
        long=True,
        schedule="turns-rising",
        baseline="h-long-b",
    ),
)


def combo(name: str, cause: str, what: str, size: str = "loud", **knobs: object) -> CalibRun:
    run = fault(cause, size, name, what, **knobs)  # type: ignore[arg-type]
    return replace(run, kind="combo")


COMBOS: tuple[CalibRun, ...] = (
    combo(
        "combo-stale-splitkv",
        "policy+code_path",
        "rollout weights one optimizer step behind and the off-by-one split-KV merge",
        weights="iter-lag",
        engine=SPLIT_OFF_BY_ONE,
    ),
    combo(
        "combo-topp-template",
        "semantics+template",
        "top-p 0.9 renormalised in the engine and the trainer's tool responses ending in \\r\\n",
        engine=EngineConfig(temperature=0.9, top_p=0.9),
        render="crlf",
    ),
    combo(
        "combo-fp8kv-gpu",
        "precision+hardware",
        "fp8 (e4m3) KV cache everywhere, and the L20 replica's off-by-one split-KV merge",
        engine=FP8_KV,
        replicas=replicas(None, None, None, replace(FP8_KV, kernel=SPLIT_OFF_BY_ONE.kernel)),
        baseline="h-gpus",
    ),
    combo(
        "combo-stale-splitkv-subtle",
        "policy+code_path",
        "rollout weights one optimizer step behind and the split-KV combine that forgets the row "
        "sums (KV >= 192, batches under 16): both subtle",
        size="subtle",
        weights="iter-lag",
        engine=SPLIT_ROWSUM,
    ),
    combo(
        "combo-temp-splitkv",
        "semantics+code_path",
        "the trainer without the engine's temperature (1.0 against 0.9) and the split-KV combine "
        "that forgets the row sums",
        engine=SPLIT_ROWSUM,
        trainer_temperature=1.0,
    ),
    combo(
        "combo-stale-gpu",
        "policy+hardware",
        "rollout weights one optimizer step behind on every gpu, and the L20 replica's "
        "off-by-one split-KV merge",
        weights="iter-lag",
        replicas=replicas(None, None, None, SPLIT_OFF_BY_ONE),
        baseline="h-gpus",
    ),
    combo(
        "combo-template-fp8kv",
        "template+precision",
        "the trainer's tool responses ending in \\r\\n and an fp8 (e4m3) KV cache in the engine",
        engine=FP8_KV,
        render="crlf",
    ),
    combo(
        "combo-topp-stale",
        "semantics+policy",
        "top-p 0.98 renormalised in the engine (subtle) and rollout weights one checkpoint behind",
        engine=EngineConfig(temperature=0.9, top_p=0.98),
        weights="ckpt-lag",
    ),
    combo(
        "combo-topp-stale-subtle",
        "semantics+policy",
        "top-p 0.98 renormalised in the engine and rollout weights one optimizer step behind: "
        "both subtle",
        size="subtle",
        engine=EngineConfig(temperature=0.9, top_p=0.98),
        weights="iter-lag",
    ),
    combo(
        "combo-topp-fp8kv",
        "semantics+precision",
        "top-p 0.98 renormalised in the engine and an fp8 (e4m3) KV cache in the engine",
        engine=EngineConfig(temperature=0.9, top_p=0.98, path=NumericPath(kv_cache="e4m3")),
    ),
    combo(
        "combo-temp-fp8kv",
        "semantics+precision",
        "the trainer at temperature 0.91 against the engine's 0.9 and an fp8 (e4m3) KV cache in "
        "the engine",
        engine=FP8_KV,
        trainer_temperature=0.91,
    ),
    combo(
        "combo-router-fp8kv",
        "routing+precision",
        "MoE engine's router logits rounded to fp8 (e4m3) and an fp8 (e4m3) KV cache",
        model="moe",
        baseline="h-moe-b",
        engine=EngineConfig(temperature=0.9, path=NumericPath(router="e4m3", kv_cache="e4m3")),
    ),
    combo(
        "combo-template-splitkv",
        "template+code_path",
        "the trainer's tool responses ending in \\r\\n and the split-KV combine that forgets "
        "the row sums (KV >= 192, batches under 16)",
        engine=SPLIT_ROWSUM,
        render="crlf",
    ),
)
