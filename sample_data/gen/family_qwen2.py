"""The family's ninth dense member (family.py --arch qwen2): a `transformers` Qwen2 of the
Llama's size over the same BPE, the layout of Qwen2.5, the model most RL recipes train: biases
on the query, key and value projections (none on the output), rotary positions of base 1e6,
RMSNorms before each block, SwiGLU, grouped-query attention, embeddings tied to the lm_head as
in its small sizes.

Its attention goes through transformers' attention interface as the Llama's does, so the
engine's kernel (gen/family_engine.py: the fp8 KV cache, the split-KV merges) acts on it
unchanged, on keys that carry their bias; its RMSNorms have the Llama's ``w * x * rsqrt(...)``
form, so the bf16 norm fault takes that form; the engine's fp32 head is a copy of the tied
embeddings made fp32."""

from __future__ import annotations

from transformers import Qwen2Config

from gen.family_size import NO_SPECIAL_IDS, SIZE

LABEL = "qwen2-4x128"  # corpus.json's model: LABEL-bpe<V>


def qwen2_config(vocab: int) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=vocab,
        **SIZE,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        use_sliding_window=False,  # every layer global, as Qwen2.5's configs ship
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        **NO_SPECIAL_IDS,
    )
