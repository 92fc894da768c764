"""The family's third dense member (family.py --arch gemma2): a `transformers` Gemma2 of the
Llama's size over the same BPE, for a model whose numerics `diagnose` was never tuned on:
final-logit soft-capping, embeddings scaled by sqrt(hidden), GeGLU, (1 + w) RMSNorms before and
after each block, tied embeddings, sliding-window (128) and global attention layers in turn.

Its attention logits are not soft-capped, so that plain SDPA (the trainer's and the engine
kernel's) computes the model's own function."""

from __future__ import annotations

import torch
from transformers import Gemma2Config, Gemma2ForCausalLM
from transformers.models.gemma2.modeling_gemma2 import Gemma2RMSNorm

from gen.family_size import SIZE

LABEL = "gemma2-4x128"  # corpus.json's model: LABEL-bpe<V>


def gemma2_config(vocab: int) -> Gemma2Config:
    return Gemma2Config(
        vocab_size=vocab,
        **SIZE,
        head_dim=32,
        sliding_window=128,  # layer_types: sliding, full, sliding, full
        final_logit_softcapping=30.0,
        attn_logit_softcapping=None,
        query_pre_attn_scalar=32,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        pad_token_id=None,  # Gemma2's default 0 would pin token 0's embedding at zero
        attn_implementation="sdpa",
    )


def new_gemma2(config: Gemma2Config) -> Gemma2ForCausalLM:
    """The model of ``config`` with SDPA attention: transformers refuses SDPA for Gemma2 when it
    builds one (SDPA cannot soft-cap attention logits), so it is built eager and switched; with
    ``attn_logit_softcapping=None`` both compute the same function."""
    assert config.attn_logit_softcapping is None, "SDPA cannot soft-cap attention logits"
    wanted = config._attn_implementation or "sdpa"
    config._attn_implementation = "eager"
    try:
        model = Gemma2ForCausalLM(config)
    finally:
        config._attn_implementation = wanted
    model.config._attn_implementation = wanted
    return model


def is_gemma2_norm(module: torch.nn.Module) -> bool:
    return isinstance(module, Gemma2RMSNorm)


def gemma2_norm_bf16(self: Gemma2RMSNorm, hidden: torch.Tensor) -> torch.Tensor:
    """Gemma2's RMSNorm (float statistics, ``x * rsqrt(mean(x^2) + eps) * (1 + w)``) with its
    statistics and scaling kept in bf16."""
    h = hidden.to(torch.bfloat16)
    variance = h.pow(2).mean(-1, keepdim=True)
    return (h * torch.rsqrt(variance + self.eps)) * (1.0 + self.weight.to(torch.bfloat16))
