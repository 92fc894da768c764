"""The second family's two numeric paths: a bf16 engine that decodes through transformers' own
KV cache (left-padded batches, one token at a time) and an fp32 trainer that scores each whole
sequence in one forward; and the faults, each where it happens in a real stack.

- the sampler: temperature, top-p, a repetition penalty, raw logprobs (`Sampler`);
- the attention kernel of the engine (`EngineKernel`, registered with transformers' attention
  interface): an fp8 KV cache (keys and values rounded to float8_e4m3fn, unscaled, as a cache
  with the default scale of 1), a split-KV decode whose partial results are merged with their
  log-sum-exp rounded (bf16 or fp8) once the KV length passes a threshold;
- one device's kernels: RMSNorm (or GPT-NeoX's, GPT-2's and Cohere's LayerNorm) statistics in
  bf16 (`bf16_norm_stats`);
- the engine's lm_head in fp32 (an improvement; with tied embeddings, a copy of them in fp32,
  Gemma2's final soft-capping and Cohere's logit scale still applied after it, Phi's bias kept; GPT-NeoX's
  untied head is ``lm_head`` in transformers 5, Pythia checkpoints' ``embed_out``; GPT-2's is
  tied to ``transformer.wte``);
- the MoE member's routers (gen/family_moe.py): each side's experts recorded per input position,
  the trainer replaying the engine's (R3), the engine's router logits rounded to fp8.
"""

from __future__ import annotations

import types
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from gen.family_cohere import cohere_norm_bf16, is_cohere_norm
from gen.family_gemma2 import gemma2_norm_bf16, is_gemma2_norm
from gen.family_gptneox import is_layernorm, layernorm_bf16
from gen.family_moe import force, forced_rows, is_moe, last_routes, routers

KERNEL_NAME = "family_engine"
FP8 = torch.float8_e4m3fn


@dataclass(frozen=True)
class EngineKernel:
    fp8_kv: bool = False
    split_at: int = 0  # 0: no split; else decode steps with more keys merge two partials
    lse_dtype: torch.dtype = torch.bfloat16  # the rounding of each partial's log-sum-exp
    drop_key: bool = False  # off by one: the second partial starts a key late


@dataclass(frozen=True)
class Sampler:
    temperature: float = 0.9
    top_p: float = 1.0
    repetition_penalty: float = 1.0  # vLLM's: logits of tokens seen in prompt or output
    logprobs: str = "processed"  # "raw": log_softmax of the logits before any processing


def _split_merge(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    scaling: float,
    split: int,
    lse_dtype: torch.dtype,
    drop_key: bool,
) -> torch.Tensor:
    """Decode attention over keys [0, split) and [split, n) separately, merged by their
    log-sum-exps rounded to `lse_dtype` (the fault: the merge weights are off by the rounding);
    `drop_key`: the second partial starts one key late, so key `split` is never attended."""
    rep = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(rep, dim=1).float()
    v = v.repeat_interleave(rep, dim=1).float()
    scores = (q.float() @ k.transpose(-1, -2)) * scaling
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.float()
    outs, lses = [], []
    for lo, hi in ((0, split), (split + int(drop_key), scores.shape[-1])):
        s = scores[..., lo:hi]
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        p = torch.exp(s - lse).nan_to_num(0.0)
        outs.append(p @ v[..., lo:hi, :])
        lses.append(lse.to(lse_dtype).float())
    both = torch.stack(lses)
    weights = torch.softmax(both.nan_to_num(float("-inf"), neginf=float("-inf")), dim=0)
    weights = weights.nan_to_num(0.0)
    out = weights[0] * outs[0] + weights[1] * outs[1]
    return out.to(q.dtype).transpose(1, 2).contiguous()


def engine_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    kernel: EngineKernel = getattr(module.config, "engine_kernel", EngineKernel())
    if kernel.fp8_kv:
        key = key.to(FP8).to(query.dtype)
        value = value.to(FP8).to(query.dtype)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    if kernel.split_at and query.shape[-2] == 1 and key.shape[-2] > kernel.split_at:
        return _split_merge(
            query,
            key,
            value,
            attention_mask,
            scale,
            kernel.split_at,
            kernel.lse_dtype,
            kernel.drop_key,
        ), None
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scale, **kwargs
    )


AttentionInterface.register(KERNEL_NAME, engine_attention)
AttentionMaskInterface.register(KERNEL_NAME, sdpa_mask)


def _llama_norm_bf16(self: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    h = hidden.to(torch.bfloat16)
    variance = h.pow(2).mean(-1, keepdim=True)
    return self.weight * (h * torch.rsqrt(variance + self.variance_epsilon))


def bf16_norm_stats(model: PreTrainedModel) -> None:
    """Every norm computes its statistics in bf16 (a device whose fused norm kernel keeps them
    in the activations' dtype), each in its own form: Llama's, Qwen2-MoE's, Qwen3's (its
    per-head query and key norms too) and OLMo 2's (its post-norms and its norms over the whole
    query and key projections; OLMo 2 multiplies the weight in fp32, here in bf16)
    ``w * x * rsqrt(...)``, Gemma2's ``x * rsqrt(...) * (1 + w)`` (gen/family_gemma2.py), GPT-NeoX's and GPT-2's LayerNorms their mean and
    variance, then weight and bias (gen/family_gptneox.py), Cohere's bias-free LayerNorm its
    mean and variance, then weight (gen/family_cohere.py)."""
    for module in model.modules():
        if is_gemma2_norm(module):
            module.forward = types.MethodType(gemma2_norm_bf16, module)
        elif is_layernorm(module):
            module.forward = types.MethodType(layernorm_bf16, module)
        elif is_cohere_norm(module):
            module.forward = types.MethodType(cohere_norm_bf16, module)
        elif type(module).__name__.endswith("RMSNorm"):
            module.forward = types.MethodType(_llama_norm_bf16, module)


class Fp32Head(torch.nn.Module):
    """The engine's lm_head in fp32: a copy of the head's weight (and of its bias, Phi's) made
    fp32, applied to the hidden states made fp32."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(weight.float(), requires_grad=False)
        self.bias = None if bias is None else torch.nn.Parameter(bias.float(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x.float() @ self.weight.t()
        return out if self.bias is None else out + self.bias


def attention_modules(model: PreTrainedModel) -> list[torch.nn.Module]:
    """Each layer's attention: ``self_attn`` (Llama, Gemma2, Qwen3, OLMo 2, Cohere, Qwen2-MoE),
    GPT-NeoX's ``attention`` or GPT-2's ``attn``, under the base model's layers
    (``model.model.layers``, ``model.gpt_neox.layers`` or GPT-2's ``model.transformer.h``)."""
    base = model.base_model
    layers: torch.nn.ModuleList = base.layers if hasattr(base, "layers") else base.h
    return [
        getattr(layer, "self_attn", None) or getattr(layer, "attention", None) or layer.attn
        for layer in layers
    ]


def prepare_engine(
    model: PreTrainedModel,
    kernel: EngineKernel,
    fp32_head: bool,
    norm_bf16: bool,
    router_rounding: torch.dtype | None = None,
) -> PreTrainedModel:
    model.config.engine_kernel = kernel
    model.config._attn_implementation = KERNEL_NAME
    for attention in attention_modules(model):
        attention.config = model.config
    if fp32_head:
        head = model.lm_head
        model.lm_head = Fp32Head(head.weight.data, None if head.bias is None else head.bias.data)
    if norm_bf16:
        bf16_norm_stats(model)
    for router in routers(model):
        router.rounding = router_rounding
    return model


def process(logits: torch.Tensor, s: Sampler, history: list[list[int]]) -> torch.Tensor:
    """The sampler's logits (fp32): the penalty on seen tokens, the temperature, top-p."""
    out = logits.float().clone()
    if s.repetition_penalty != 1.0:
        for row, seen in enumerate(history):
            ids = torch.tensor(sorted(set(seen)), dtype=torch.long)
            vals = out[row, ids]
            out[row, ids] = torch.where(
                vals > 0, vals / s.repetition_penalty, vals * s.repetition_penalty
            )
    out = out / s.temperature
    if s.top_p < 1.0:
        probs, order = torch.sort(torch.softmax(out, -1), dim=-1, descending=True)
        before = torch.cumsum(probs, -1) - probs
        drop = torch.zeros_like(out, dtype=torch.bool).scatter(-1, order, before >= s.top_p)
        out = out.masked_fill(drop, float("-inf"))
    return out


def decode_turn(
    model: PreTrainedModel,
    contexts: list[list[int]],
    sampler: Sampler,
    stops: set[int],
    max_new: int,
    min_new: int,
    gen: torch.Generator,
) -> list[tuple[list[int], list[float]]]:
    """One model turn for every context: prefill the left-padded batch, then decode one token
    at a time through the model's KV cache until each row samples a stop token (after
    `min_new` tokens) or reaches `max_new`.

    An MoE model's routes of the turn are left in ``model.turn_routes``: per context, int16
    ``[len(context) + generated - 1, layers, top_k]``, each input position's experts (the last
    sampled token is never an input)."""
    n = len(contexts)
    width = max(map(len, contexts))
    ids = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, c in enumerate(contexts):
        ids[i, width - len(c) :] = torch.tensor(c)
        mask[i, width - len(c) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    history = [list(c) for c in contexts]
    outs: list[tuple[list[int], list[float]]] = [([], []) for _ in contexts]
    done = [False] * n
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        cache = out.past_key_values
        logits = out.logits[:, -1]
        last = positions[:, -1]
        moe = is_moe(model)
        trace: list[list[np.ndarray]] = []
        if moe:
            full = last_routes(model, n, width)
            trace = [[full[i, mask[i].bool().numpy()]] for i in range(n)]
        for _ in range(max_new):
            processed = process(logits, sampler, history)
            probs = torch.softmax(processed, -1)
            token = torch.multinomial(probs, 1, generator=gen).squeeze(1)
            chosen = processed if sampler.logprobs == "processed" else logits.float()
            lp = torch.log_softmax(chosen, -1).gather(1, token[:, None]).squeeze(1)
            for i in range(n):
                if done[i]:
                    continue
                t = int(token[i])
                outs[i][0].append(t)
                outs[i][1].append(float(lp[i]))
                history[i].append(t)
                if (t in stops and len(outs[i][0]) >= min_new) or len(outs[i][0]) >= max_new:
                    done[i] = True
            if all(done):
                break
            mask = torch.cat([mask, torch.ones((n, 1), dtype=torch.long)], dim=1)
            last = last + 1
            out = model(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=last[:, None],
                cache=cache,
                use_cache=True,
            )
            cache = out.past_key_values
            logits = out.logits[:, -1]
            if moe:
                step = last_routes(model, n, 1)
                for i in range(n):
                    if not done[i]:
                        trace[i].append(step[i])
    model.turn_routes = [np.concatenate(rows) for rows in trace] if moe else None
    return outs


def score(
    model: PreTrainedModel,
    sequences: list[list[int]],
    temperature: float,
    batch: int = 16,
    replay: list[np.ndarray] | None = None,
) -> list[list[float]]:
    """The trainer: one forward of each right-padded sequence in the model's dtype (fp32, or bf16
    as mixed precision runs it), the logits upcast to fp32; entry j of a row is the logprob of
    token j given tokens before it (entry 0 is 0.0).

    An MoE model's routes are left in ``model.scored_routes`` (per sequence, int16
    ``[len, layers, top_k]``); ``replay``: per sequence, the rows its first positions use
    instead of the trainer's own choice (rollout routing replay)."""
    result: list[list[float]] = []
    moe = is_moe(model)
    routes: list[np.ndarray] = []
    with torch.no_grad():
        for lo in range(0, len(sequences), batch):
            chunk = sequences[lo : lo + batch]
            width = max(map(len, chunk))
            ids = torch.zeros((len(chunk), width), dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, s in enumerate(chunk):
                ids[i, : len(s)] = torch.tensor(s)
                mask[i, : len(s)] = 1
            if replay is not None:
                found = last_routes_shape(model)
                force(model, forced_rows(replay[lo : lo + batch], width, *found))
            logits = model(input_ids=ids, attention_mask=mask).logits.float() / temperature
            force(model, None)
            lps = F.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            if moe:
                chosen = last_routes(model, len(chunk), width)
                routes.extend(chosen[i, : len(s)] for i, s in enumerate(chunk))
            for i, s in enumerate(chunk):
                result.append([0.0, *lps[i, : len(s) - 1].tolist()])
    model.scored_routes = routes if moe else None
    return result


def last_routes_shape(model: PreTrainedModel) -> tuple[int, int]:
    """(layers, top_k) of an MoE model's routers."""
    found = routers(model)
    return len(found), found[0].top_k
