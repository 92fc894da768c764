"""The family's eighth dense member (family.py --arch cohere): a `transformers` Cohere (Command-R)
of the Llama's size over the same BPE, for another model whose numerics `diagnose` was never
tuned on: one LayerNorm without a bias before a parallel block (attention and MLP both read it,
their outputs added to the residual together), rotary positions on interleaved pairs of each
head computed in fp32, SwiGLU, every head its own keys and values, embeddings tied to the head,
and the logits multiplied by a scale (1/16) after the head.

Its attention goes through transformers' attention interface as the Llama's does, so the
engine's kernel (gen/family_engine.py: the fp8 KV cache, the split-KV merges) acts on it
unchanged; the engine's fp32 head replaces the tied head and the scale still follows it. Its
norms are Cohere's own LayerNorm (statistics in fp32, a weight, no bias), so the bf16 norm fault
takes that form (`cohere_norm_bf16`)."""

from __future__ import annotations

import torch
from transformers import CohereConfig

from gen.family_size import NO_SPECIAL_IDS, SIZE

LABEL = "cohere-4x128"  # corpus.json's model: LABEL-bpe<V>
LOGIT_SCALE = 0.0625  # Command-R's


def cohere_config(vocab: int) -> CohereConfig:
    """SIZE's width, layers, heads (4 of 32) and MLP width; as many key-value heads as query
    heads (Command-R's); no pad, bos or eos ids (Cohere's defaults are the BPE's or past it)."""
    size = {**SIZE, "num_key_value_heads": SIZE["num_attention_heads"]}
    return CohereConfig(
        vocab_size=vocab,
        **size,
        rope_parameters={"rope_type": "default", "rope_theta": 500_000.0},
        attention_bias=False,
        use_qk_norm=False,
        logit_scale=LOGIT_SCALE,
        tie_word_embeddings=True,
        layer_norm_eps=1e-5,
        **NO_SPECIAL_IDS,
    )


def is_cohere_norm(module: torch.nn.Module) -> bool:
    return type(module).__name__ == "CohereLayerNorm"


def cohere_norm_bf16(self: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """Cohere's LayerNorm (mean and variance in fp32, then its weight, no bias) with its
    statistics and the weight's product kept in bf16, each rounded as a bf16 engine's would
    be."""
    h = hidden.to(torch.bfloat16)
    centred = h - h.mean(-1, keepdim=True)
    variance = centred.pow(2).mean(-1, keepdim=True)
    return self.weight.to(torch.bfloat16) * (
        centred * torch.rsqrt(variance + self.variance_epsilon)
    )
