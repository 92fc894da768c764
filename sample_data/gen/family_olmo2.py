"""The family's seventh dense member (family.py --arch olmo2): a `transformers` OLMo 2 of the
Llama's size over the same BPE, for another model whose numerics `diagnose` was never tuned on:
its RMSNorms sit after each attention and each MLP (their outputs are normed before the residual
adds them: no norm before a block), one RMSNorm over the whole query projection and one over the
whole key projection before the rotary positions (QK-norm across the heads, not per head),
rotary base 5e5, SwiGLU, every head its own keys and values, untied embeddings. Its RMSNorm
multiplies its weight in fp32 before the cast (Llama's in the activations' dtype).

Its attention goes through transformers' attention interface as the Llama's does, so the
engine's kernel (gen/family_engine.py: the fp8 KV cache, the split-KV merges) acts on it
unchanged, on the normed and rotated keys the cache holds; its norms are RMSNorms, so the bf16
norm fault takes the Llama's ``w * x * rsqrt(...)`` form, all in bf16."""

from __future__ import annotations

from transformers import Olmo2Config

from gen.family_size import NO_SPECIAL_IDS, SIZE

LABEL = "olmo2-4x128"  # corpus.json's model: LABEL-bpe<V>


def olmo2_config(vocab: int) -> Olmo2Config:
    """SIZE's width, layers, heads (4 of 32) and MLP width; as many key-value heads as query
    heads (OLMo 2 has no grouped-query attention: SIZE's KV heads are not used); no pad or eos
    ids (OLMo 2's defaults, 1 and 50279, are the BPE's or past it)."""
    size = {**SIZE, "num_key_value_heads": SIZE["num_attention_heads"]}
    return Olmo2Config(
        vocab_size=vocab,
        **size,
        rope_parameters={"rope_type": "default", "rope_theta": 500_000.0},
        attention_bias=False,
        tie_word_embeddings=False,
        rms_norm_eps=1e-6,
        **NO_SPECIAL_IDS,
    )
