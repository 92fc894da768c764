"""The family's tenth dense member (family.py --arch granite): a `transformers` Granite of the
Llama's size over the same BPE, the layout of Granite 3: a Llama whose numbers are scaled at four
places by the config (muP-style multipliers): the embeddings multiplied by 12 before the first
layer, each block's output by 0.22 before the residual adds it, the attention scores by 1/32
(one over the head's width, not its square root) and the logits divided by 8; RMSNorms before
each block, SwiGLU, grouped-query attention, rotary base 1e4, embeddings tied to the lm_head.

Its attention goes through transformers' attention interface with the config's multiplier as
its scale, so the engine's kernel (gen/family_engine.py: the fp8 KV cache, the split-KV merges)
acts on it unchanged at that scale; its RMSNorms have the Llama's ``w * x * rsqrt(...)`` form,
so the bf16 norm fault takes that form; the engine's fp32 head is a copy of the tied embeddings
made fp32, the logits still divided after it."""

from __future__ import annotations

from transformers import GraniteConfig

from gen.family_size import NO_SPECIAL_IDS, SIZE

LABEL = "granite-4x128"  # corpus.json's model: LABEL-bpe<V>


def granite_config(vocab: int) -> GraniteConfig:
    head = SIZE["hidden_size"] // SIZE["num_attention_heads"]
    return GraniteConfig(
        vocab_size=vocab,
        **SIZE,
        rope_parameters={"rope_type": "default", "rope_theta": 10_000.0},
        embedding_multiplier=12.0,
        residual_multiplier=0.22,
        attention_multiplier=1.0 / head,
        logits_scaling=8.0,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        **NO_SPECIAL_IDS,
    )
