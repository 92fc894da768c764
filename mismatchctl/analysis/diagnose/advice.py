"""What to try next, where several checks (or a check and the cause it names) give the same
advice; advice that one check alone gives lives in its module."""

from __future__ import annotations

import shlex

# the offset and temperature checks, and the cause "semantic"
PROCESSED_HINT = (
    "make both sides compute the same distribution: the engine must return processed logprobs "
    "(vLLM V1: set logprobs-mode=processed_logprobs; V1 returns raw logprobs by default) and the "
    "trainer must apply the same temperature, top-p/top-k and penalties to its logits"
)

# the turn_edges check, and the cause "template"
TEMPLATE_ADVICE = (
    "a chat-template or rendering fault: the trainer's context around tool responses is not the "
    "one the engine sampled from (a re-rendered tool response, another chat template or version, "
    "special tokens, whitespace or a re-tokenization of the text instead of the engine's token "
    "ids); compare both sides' token ids at the start of the turns after a tool response. No "
    "importance correction fixes a different context"
)

# the turn_ends check, and the cause "turn ends"
STOP_ADVICE = (
    "the last token of each turn carries the mismatch: how the two sides handle the stop: the "
    "logprob the engine returns for the end-of-sequence or stop-string token (after a stop "
    "string, processed or raw), whether the trainer scores that token with the same mask and "
    "template (an end-of-turn token the chat template appends that the engine never sampled), "
    "the tool-call close before a tool response; compare the last token ids and logprobs of a "
    "few turns on both sides (`mismatchctl show`); a correction would only reweight it"
)

# the localized check, and the cause "code path"
CODE_PATH_ADVICE = (
    "fix or disable that path, not the objective: the attention backend or its split-KV / "
    "cascade kernels (vLLM disable_cascade_attn=True), batch-invariant kernels, the engine "
    "version; importance sampling would only reweight the damage"
)

# the cause "code path" of some steps (causes/code_path.py): what changed at a step
STEPS_ADVICE = (
    "find what changed at those steps: the engine that served them (a replica or node, its "
    "settings, kernels or version after a restart: `mismatchctl report RUN --steps A..B "
    "--by-gpu`) or the weights it served (a weight sync or reload that went wrong, CUDA graphs "
    "keeping stale pointers after a sleep/wake, an off-policy lag whose size differs from step "
    "to step: compare the engine's weights with the trainer's there); not the objective: "
    "importance sampling would only reweight the damage"
)

# the cause "code path" of the starts of the prefills (causes/prefill.py)
PREFILL_ADVICE = (
    "the first tokens after every prefill are hot, the prompt's longer ones too: the engine's "
    "prefill path (chunked prefill and how it merges the chunks' attention, padded or batched "
    "prefills, prefix caching); diagnose a few steps with chunked prefill off or a larger chunk, "
    "not the objective: importance sampling would only reweight the damage"
)

# the localized check, and the cause "code path" of the first turns
FIRST_TURNS_LOCAL_ADVICE = (
    "the first turns (no tool response before them) are hotter than the turns after tool "
    "responses at the same token probabilities: what only they have is the prompt; compare the "
    "prompt's token ids on both sides (chat template, system prompt, BOS and special tokens) and "
    "how each side prefills it (chunked prefill, prefix caching); then diagnose again"
)

# the low_probability check, and the cause "low probability"
LOW_PROB_ADVICE = (
    "the mismatch lives in tokens the engine sampled as unlikely: check the precision of "
    "the sampler's logits (fp32 lm_head on both sides), consider a smaller top-p (fewer such "
    "tokens, some bias), and prefer a sequence-level correction over a token-level one"
)

# the hardware check, and the cause "hardware"
HARDWARE_ADVICE = (
    "kernels differ between gpu generations (vLLM's cascade attention hit a FlashAttention-2 "
    "split-KV bug on non-Hopper GPUs such as A100 and L20): try disable_cascade_attn=True or "
    "batch-invariant kernels, or move the run to the gpus that match the baseline"
)

# the policy_signs check, and the cause "policy" (another policy)
POLICY_SIGNS_ADVICE = (
    "whole responses lean one way, as when the trainer's weights are not the sampler's (stale "
    "weights, a weight sync that did not land, another checkpoint or LoRA state), not as "
    "independent numeric noise does: compare the weight versions of both sides (keep a "
    "weight_version column in the dumps, or tag the run --tag weight_lag=N); if they match, "
    "compare the model each side builds from them (the rotary base and scaling, the norms' "
    "epsilon, the attention's softmax scale, a quantized copy of the weights: another function "
    "at every token leans the responses too); then a kernel biased along each response (a "
    "split-KV combine that drops its row sums leans the responses it hits too) is the other "
    "candidate: diagnose with --baseline on a known-good run of the same weights; importance "
    "sampling would not fix any of them"
)

# the routing_flips check, and the cause "routing"
REPLAY_ADVICE = (
    "enable rollout routing replay (R3: the trainer reuses the engine's routes; verl "
    "router_replay mode R3, slime/miles --use-rollout-routing-replay), then re-ingest with "
    "--tag routing_replay=r3 to check it holds"
)

# the staleness check, and the cause "policy" (stale weights)
STALE_ADVICE = (
    "rollouts from older weights are a policy mismatch, not a numeric one: check the weight "
    "sync path (the engine must receive this step's weights before sampling; vLLM: pause with "
    "mode='keep', clear_cache=False; no prefix caching across updates) and bound the staleness; "
    "if the lag is intended (asynchronous RL), correct it as off-policy data (decoupled PPO with "
    "the behaviour policy's logprobs), not as training-inference mismatch"
)

# the regimes and localized checks, when their steps are a growth
GROWTH_STEPS_ADVICE = (
    "the elevated steps are the late ones of a mismatch that rises along a line, not a jump to a "
    "second level: a growth (the trend check), not a code path some steps take; see the trend "
    "and cause checks"
)


def attribute_advice(label: str, name: str, values: str) -> str:
    """What to do about a part of the run that is the samples of some attribute values (the
    localized check, and the cause "code path" of those samples)."""
    look = f"`mismatchctl tokens {shlex.quote(label)} --where attr:{name}={values}`"
    if "," in values:
        look = f"`mismatchctl tokens {shlex.quote(label)} --where attr:{name}=VALUE`"
    return (
        f"the part found is the samples with {name} {values}: what those requests take that "
        "the others do not (their prompt template or tokenization, a per-source sampling "
        "setting, the replica or engine that served them, their context lengths), rather than "
        f"a kernel every request takes; compare their tokens on both sides ({look}), then "
        "diagnose again"
    )
