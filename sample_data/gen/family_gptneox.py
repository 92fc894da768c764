"""The family's fifth dense member (family.py --arch gptneox): a `transformers` GPT-NeoX
(Pythia-style) of the Llama's size over the same BPE, for another model whose numerics
`diagnose` was never tuned on: LayerNorms with biases (not RMSNorms) before attention and MLP,
a parallel residual (attention and MLP both read the block's input), rotary positions on a
quarter of each head (base 10000), a GELU MLP, q/k/v/output biases, untied embeddings.

Its attention goes through transformers' attention interface as the Llama's does, so the
engine's kernel (gen/family_engine.py: the fp8 KV cache, the split-KV merges) acts on it
unchanged, on the partly rotated keys the cache holds; its norms are LayerNorms, so the bf16
norm fault takes their form (`layernorm_bf16`)."""

from __future__ import annotations

import torch
from transformers import GPTNeoXConfig

from gen.family_size import SIZE

LABEL = "gptneox-4x128"  # corpus.json's model: LABEL-bpe<V>


def gptneox_config(vocab: int) -> GPTNeoXConfig:
    """SIZE's width, layers, heads (4 of 32) and MLP width; every head has its own keys and
    values (GPT-NeoX has no grouped-query attention: SIZE's KV heads are not used)."""
    size = {k: v for k, v in SIZE.items() if k != "num_key_value_heads"}
    return GPTNeoXConfig(
        vocab_size=vocab,
        **size,
        hidden_act="gelu",
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10_000.0,
            "partial_rotary_factor": 0.25,  # rotary_pct: 8 of each head's 32 dimensions
        },
        use_parallel_residual=True,
        attention_bias=True,
        tie_word_embeddings=False,
        layer_norm_eps=1e-5,
        attn_implementation="sdpa",
    )


def is_layernorm(module: torch.nn.Module) -> bool:
    return isinstance(module, torch.nn.LayerNorm)


def layernorm_bf16(self: torch.nn.LayerNorm, hidden: torch.Tensor) -> torch.Tensor:
    """A LayerNorm (float statistics in torch's kernel) with its mean and variance kept in bf16,
    each rounded as a bf16 engine's would be, then the weight and bias applied in bf16."""
    h = hidden.to(torch.bfloat16)
    centred = h - h.mean(-1, keepdim=True)
    variance = centred.pow(2).mean(-1, keepdim=True)
    out = centred * torch.rsqrt(variance + self.eps)
    if self.weight is not None:
        out = out * self.weight.to(torch.bfloat16)
    if self.bias is not None:
        out = out + self.bias.to(torch.bfloat16)
    return out
