"""The MoE member's runs (gen/family_moe.py): healthy runs with natural routing and with routing
replay, faults of the router and of the routes' capture, the dense classes seen through experts,
and combinations of two. Rolled out, scored and written as the family's runs are
(gen/family_runs.py), with both sides' routes in the dumps."""

from __future__ import annotations

from functools import partial

import torch

from gen.family_engine import Sampler
from gen.family_runs import FP8KV, SPLIT_LOUD, FamilyRun, fault, healthy

_healthy = partial(healthy, baseline="m-h-b")
_fault = partial(fault, baseline="m-h-a")


FAMILY_MOE: tuple[FamilyRun, ...] = (
    _healthy(
        "m-h-a",
        "natural routing: the bf16 engine and the fp32 trainer choose their own experts",
        loader="a",
    ),
    _healthy("m-h-b", "as m-h-a, loader b", baseline="m-h-a", loader="b"),
    _healthy("m-h-c", "as m-h-a, loader c, routes as SGLang base64", loader="c", encoding="sglang"),
    _healthy(
        "m-h-t06", "temperature 0.6 on both sides", sampler=Sampler(temperature=0.6), loader="d"
    ),
    _healthy("m-h-many-turns", "four or five turns", turns=(4, 5), loader="g"),
    _healthy("m-h-gpus", "four devices, one engine", gpus=4, loader="h"),
    FamilyRun(
        "m-r3-a",
        "improvement",
        None,
        "routing replay (R3): the trainer uses the engine's experts",
        None,
        "m-h-b",
        routing="replay",
        loader="k",
    ),
    _healthy(
        "m-r3-b",
        "as m-r3-a, loader l, routes as prime-rl bytes",
        baseline="m-r3-a",
        routing="replay",
        loader="l",
        encoding="prime",
    ),
    _fault(
        "m-router-fp8",
        "routing",
        "subtle",
        "the engine's router logits rounded to fp8 (e4m3): more experts flip",
        router_rounding=torch.float8_e4m3fn,
    ),
    _fault(
        "m-router-e5m2",
        "routing",
        "loud",
        "the engine's router logits rounded to fp8 (e5m2): many experts flip",
        router_rounding=torch.float8_e5m2,
    ),
    _fault(
        "m-capture-shift",
        "routing_capture",
        "subtle",
        "replay on; the trainer's routes dumped one position late",
        baseline="m-r3-b",
        routing="replay",
        capture_bug="shift",
    ),
    _fault(
        "m-capture-layers",
        "routing_capture",
        "subtle",
        "replay on; each of the trainer's layers dumped in the next layer's slot",
        baseline="m-r3-b",
        routing="replay",
        capture_bug="layers",
    ),
    _fault(
        "m-replay-late",
        "routing_capture",
        "loud",
        "the trainer replays each position's experts at the next position (what it dumps)",
        baseline="m-r3-b",
        routing="replay-late",
    ),
    _fault("m-pol-stale", "policy", "loud", "weights one RL step behind", weights="stale"),
    _fault("m-pol-early", "policy", "loud", "a pre-training checkpoint served", weights="early"),
    _fault("m-pr-fp8kv", "precision", "loud", "an fp8 KV cache (scale 1)", kernel=FP8KV),
    _fault(
        "m-cp-splitkv",
        "code_path",
        "loud",
        "split-KV decode past 96 keys, the second partial a key late",
        kernel=SPLIT_LOUD,
    ),
    _fault(
        "m-sem-topp",
        "semantics",
        "loud",
        "top-p 0.9, processed logprobs",
        sampler=Sampler(top_p=0.9),
    ),
    _fault(
        "m-combo-router-stale",
        "routing+policy",
        "loud",
        "the e4m3 router beside weights one RL step behind",
        router_rounding=torch.float8_e4m3fn,
        weights="stale",
    ),
    _fault(
        "m-combo-capture-fp8kv",
        "routing_capture+precision",
        "loud",
        "replay with the trainer's routes dumped a position late, beside an fp8 KV cache",
        baseline="m-r3-b",
        routing="replay",
        capture_bug="shift",
        kernel=FP8KV,
    ),
    _fault(
        "m-combo-r3-splitkv",
        "code_path",
        "loud",
        "replay on (dumped correctly) beside the off-by-one split-KV merge",
        baseline="m-r3-b",
        routing="replay",
        kernel=SPLIT_LOUD,
    ),
)
