"""Fault runs where the engine reports another distribution than the trainer scores (semantics)
or samples with other weights (policy). Subtle sizes were chosen at 1.5-5x the healthy vllm_kl of
the small corpus's model, loud ones at 10x or more; trainer-side faults reuse h-a's rollouts."""

from __future__ import annotations

from gen.calib_spec import CalibRun
from gen.catalog_common import fault, proc
from gen.engine import EngineConfig

S, L = "subtle", "loud"
# bytes the model emits often: space, 'e', '_', '('
COMMON = (32, 101, 95, 40)
RAW_LOUD = EngineConfig(temperature=0.7, logprobs_mode="raw")
RAW_SUBTLE = EngineConfig(temperature=0.985, logprobs_mode="raw")


def sem(size: str, name: str, what: str, **knobs: object) -> CalibRun:
    return fault("semantics", size, name, what, **knobs)


def pol(size: str | None, name: str, what: str, weights: str) -> CalibRun:
    return fault("policy", size, name, what, weights=weights)


SEMANTICS: tuple[CalibRun, ...] = (
    sem(L, "sem-raw-loud", "engine reports raw logprobs, samples at T 0.7", engine=RAW_LOUD),
    sem(S, "sem-raw-subtle", "engine reports raw logprobs, samples at T 0.985", engine=RAW_SUBTLE),
    sem(
        S, "sem-temp-subtle", "engine T 0.9, trainer T 0.91", stream="h-a", trainer_temperature=0.91
    ),
    sem(
        L,
        "sem-temp-loud",
        "engine T 0.9, trainer without it (1.0)",
        stream="h-a",
        trainer_temperature=1.0,
    ),
    sem(
        S,
        "sem-topp-subtle",
        "engine top-p 0.98, renormalised",
        engine=EngineConfig(temperature=0.9, top_p=0.98),
    ),
    sem(
        L,
        "sem-topp-loud",
        "engine top-p 0.8, renormalised",
        engine=EngineConfig(temperature=0.9, top_p=0.8),
    ),
    sem(S, "sem-topk-subtle", "engine top-k 40, renormalised", engine=proc(top_k=40)),
    sem(L, "sem-topk-loud", "engine top-k 8, renormalised", engine=proc(top_k=8)),
    sem(S, "sem-minp-subtle", "engine min-p 0.005, renormalised", engine=proc(min_p=0.005)),
    sem(L, "sem-minp-loud", "engine min-p 0.1, renormalised", engine=proc(min_p=0.1)),
    sem(
        S,
        "sem-rep-subtle",
        "repetition penalty 1.01 in the engine only",
        engine=proc(repetition_penalty=1.01),
    ),
    sem(
        L,
        "sem-rep-loud",
        "repetition penalty 1.3 in the engine only",
        engine=proc(repetition_penalty=1.3),
    ),
    sem(
        S,
        "sem-freq-subtle",
        "frequency penalty 0.01 in the engine only",
        engine=proc(frequency_penalty=0.01),
    ),
    sem(
        L,
        "sem-presence-loud",
        "presence penalty 0.5 in the engine only",
        engine=proc(presence_penalty=0.5),
    ),
    sem(
        S,
        "sem-bias-subtle",
        "logit bias +0.05 on 4 frequent bytes in the engine only",
        engine=proc(logit_bias=tuple((t, 0.05) for t in COMMON)),
    ),
    sem(
        L,
        "sem-bias-loud",
        "logit bias +1.5 on 4 frequent bytes in the engine only",
        engine=proc(logit_bias=tuple((t, 1.5) for t in COMMON)),
    ),
    sem(
        S,
        "sem-badwords-subtle",
        "bad-words mask on '#' in the engine only",
        engine=proc(bad_ids=(35,)),
    ),
    sem(
        L,
        "sem-badwords-loud",
        "bad-words mask on '#', '_', '(', ')' in the engine only",
        engine=proc(bad_ids=(35, 95, 40, 41)),
    ),
)

POLICY: tuple[CalibRun, ...] = (
    pol(S, "pol-stale-iter", "rollout weights one optimizer step behind", "iter-lag"),
    pol(L, "pol-stale-ckpt", "rollout weights one checkpoint (10 steps) behind", "ckpt-lag"),
    pol(
        S,
        "pol-partial-layer-iter",
        "partial sync: layer 1 one optimizer step behind",
        "layer1-iter-lag",
    ),
    pol(L, "pol-partial-layer", "partial sync: layer 1 one checkpoint behind", "layer1-ckpt-lag"),
    pol(S, "pol-partial-head", "partial sync: the lm_head one checkpoint behind", "head-ckpt-lag"),
    pol(
        None,
        "pol-partial-embed",
        "partial sync: the embeddings never synced after step 0 (invisible at this model size)",
        "embed-stuck",
    ),
    pol(
        L,
        "pol-wrong-ckpt",
        "the engine serves another run's checkpoint (seed 1)",
        "wrong-checkpoint",
    ),
    pol(
        L,
        "pol-reload-jump",
        "from the middle step on, layer 2 keeps the weights of the step "
        "before (a broken reload); normal before",
        "reload-jump",
    ),
)
