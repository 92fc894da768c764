"""The family's eleventh dense member (family.py --arch phi): a `transformers` Phi of the Llama's
size over the same BPE, the layout of Phi-2: one LayerNorm (with its bias) before a parallel
block (attention and MLP both read it, their outputs added to the residual together), rotary
positions on 40% of each head (base 1e4), q/k/v/output biases, a GELU MLP (the tanh form, not
gated), untied embeddings and an lm_head with a bias, every head its own keys and values.

Its attention goes through transformers' attention interface as the Llama's does, so the
engine's kernel (gen/family_engine.py: the fp8 KV cache, the split-KV merges) acts on it
unchanged, on the partly rotated keys the cache holds; its norms are LayerNorms, so the bf16
norm fault takes their form (`layernorm_bf16`); the engine's fp32 head keeps the lm_head's
bias (``Fp32Head``)."""

from __future__ import annotations

from transformers import PhiConfig

from gen.family_size import NO_SPECIAL_IDS, SIZE

LABEL = "phi-4x128"  # corpus.json's model: LABEL-bpe<V>


def phi_config(vocab: int) -> PhiConfig:
    """SIZE's width, layers, heads (4 of 32) and MLP width; as many key-value heads as query
    heads (Phi-2 has no grouped-query attention); no bos or eos ids (Phi's defaults, 1 and 2,
    are the BPE's)."""
    size = {**SIZE, "num_key_value_heads": SIZE["num_attention_heads"]}
    return PhiConfig(
        vocab_size=vocab,
        **size,
        hidden_act="gelu_new",
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10_000.0,
            "partial_rotary_factor": 0.4,  # Phi-2's: 12 of each head's 32 dimensions (even)
        },
        qk_layernorm=False,
        tie_word_embeddings=False,
        layer_norm_eps=1e-5,
        **NO_SPECIAL_IDS,
    )
