"""The family's fourth dense member (family.py --arch qwen3): a `transformers` Qwen3 of the
Llama's size over the same BPE, for another model whose numerics `diagnose` was never tuned on:
an RMSNorm on each query and key head before the rotary positions (QK-norm), no q/k/v biases,
rotary positions of base 1e6, tied embeddings, SwiGLU, grouped-query attention.

Its attention goes through transformers' attention interface as the Llama's does, so the
engine's kernel (gen/family_engine.py: the fp8 KV cache, the split-KV merges) acts on it
unchanged, on the normed and rotated keys the cache holds; its RMSNorms (the per-head ones
included) have the Llama's ``w * x * rsqrt(...)`` form, so the bf16 norm fault takes that form."""

from __future__ import annotations

from transformers import Qwen3Config

from gen.family_size import SIZE

LABEL = "qwen3-4x128"  # corpus.json's model: LABEL-bpe<V>


def qwen3_config(vocab: int) -> Qwen3Config:
    return Qwen3Config(
        vocab_size=vocab,
        **SIZE,
        head_dim=32,  # Qwen3's default is 128
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        attention_bias=False,
        use_sliding_window=False,  # every layer global
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        attn_implementation="sdpa",
    )
