"""Kinds of fault the calibration never saw: no threshold or relation of `diagnose` was set on
them. Each changes the engine's copy of the model's own arithmetic (gen/model_faults.py) or how
the engine serves a request (recompute preemption, gen/engine.py), at a subtle and a loud size
where the knob has two, alone and beside a fault of the calibrated catalogue.

The class each is planted as is what a user should be told to fix:

* the rotary base and a sliding window are **code paths**: the engine computes another function
  only at some positions (the error of a rotary base grows with the position; a window hides keys
  only past its width), and the fix is in the engine's configuration, not in the objective;
* the softmax scale, the norms' epsilon or bf16 statistics, the MLPs' weight-only integers and a
  layer's saturating fp8 activations are **precision**: every token's logits move a little,
  independently, no part of the run hotter than the rest (as fp8 weights, the calibrated case);
* recompute preemption is **healthy**: the evicted rows' KV rebuilt by a prefill is the same
  arithmetic in another kernel shape, the noise of a healthy run.
"""

from __future__ import annotations

from dataclasses import replace

from gen.calib_spec import CalibRun
from gen.catalog_common import fault, path
from gen.catalog_healthy import healthy
from gen.catalog_other import combo
from gen.engine import EngineConfig

S, L = "subtle", "loud"
ROPE_SUBTLE = path(rope_theta=10500.0)
WINDOW_LOUD = path(window=96)
INT8_MLP = path(mlp_bits=8)
ATTN_SUBTLE = path(attn_scale=1.02)


def code(size: str, name: str, what: str, engine: EngineConfig, **knobs: object) -> CalibRun:
    return fault("code_path", size, name, what, engine=engine, **knobs)


def prec(size: str, name: str, what: str, engine: EngineConfig, **knobs: object) -> CalibRun:
    return fault("precision", size, name, what, engine=engine, **knobs)


UNSEEN_FAULTS: tuple[CalibRun, ...] = (
    code(
        S,
        "un-rope-theta-subtle",
        "the engine's rotary base 10500 (the trainer's 10000): the "
        "angles drift apart with the position",
        ROPE_SUBTLE,
    ),
    code(
        L,
        "un-rope-theta-loud",
        "the engine's rotary base 20000 (the trainer's 10000)",
        path(rope_theta=20000.0),
    ),
    code(
        S,
        "un-window-subtle",
        "a sliding attention window of 192 slots in the engine (prefill "
        "and decode): only keys further back than 192 are hidden",
        path(window=192),
    ),
    code(L, "un-window-loud", "a sliding attention window of 96 slots in the engine", WINDOW_LOUD),
    prec(
        S,
        "un-attn-scale-subtle",
        "the engine's softmax scale 1.02x the trainer's (folded into the query projection)",
        ATTN_SUBTLE,
    ),
    prec(
        L,
        "un-attn-scale-loud",
        "the engine's softmax scale 1.1x the trainer's",
        path(attn_scale=1.1),
    ),
    prec(
        S,
        "un-norm-eps-subtle",
        "the engine's LayerNorm epsilon 1e-2 (the trainer's 1e-5)",
        path(norm_eps=1e-2),
    ),
    prec(L, "un-norm-eps-loud", "the engine's LayerNorm epsilon 1e-1", path(norm_eps=1e-1)),
    prec(
        S,
        "un-norm-bf16",
        "the engine's LayerNorms keep their mean and variance in bf16",
        path(norm_bf16=True),
    ),
    prec(
        S,
        "un-mlp-int8",
        "the MLPs' weights int8 weight-only (round to nearest, per channel)",
        INT8_MLP,
    ),
    prec(
        L,
        "un-mlp-int4",
        "the MLPs' weights int4 weight-only (round to nearest, per channel)",
        path(mlp_bits=4),
    ),
    prec(
        S,
        "un-act-fp8-subtle",
        "the last MLP layer's fc2 input in e4m3 with a static range of "
        "8 (above its largest activation: rounding only)",
        path(mlp_act_layer=3, mlp_act_amax=8.0),
    ),
    prec(
        L,
        "un-act-fp8-clip",
        "the last MLP layer's fc2 input in e4m3 with a static range of 1: "
        "the largest activations saturate",
        path(mlp_act_layer=3, mlp_act_amax=1.0),
    ),
)

UNSEEN_HEALTHY: tuple[CalibRun, ...] = (
    healthy(
        "h-preempt",
        "h-b",
        "recompute preemption: at the 16th decode step of each turn every "
        "other row of the decode batch is evicted and rebuilt by a prefill of its sequence",
        engine=path(preempt_at=16, preempt_every=2),
    ),
)

UNSEEN_COMBOS: tuple[CalibRun, ...] = (
    combo(
        "combo-rope-stale",
        "code_path+policy",
        "the engine's rotary base 10500 and rollout weights one optimizer step behind",
        weights="iter-lag",
        engine=ROPE_SUBTLE,
    ),
    combo(
        "combo-window-fp8kv",
        "code_path+precision",
        "a sliding window of 96 slots and an fp8 (e4m3) KV cache in the engine",
        engine=path(window=96, kv_cache="e4m3"),
    ),
    combo(
        "combo-int8-crlf",
        "precision+template",
        "the MLPs' weights int8 weight-only and the trainer's tool responses ending in \\r\\n",
        engine=INT8_MLP,
        render="crlf",
    ),
    combo(
        "combo-attn-topp",
        "precision+semantics",
        "the engine's softmax scale 1.02x and top-p 0.9 renormalised in the engine",
        engine=replace(ATTN_SUBTLE, top_p=0.9),
    ),
)

UNSEEN: tuple[CalibRun, ...] = (*UNSEEN_HEALTHY, *UNSEEN_FAULTS, *UNSEEN_COMBOS)
