"""The family's sixth dense member (family.py --arch gpt2): a `transformers` GPT-2 of the
Llama's size over the same BPE, for another model whose numerics `diagnose` was never tuned on:
learned absolute position embeddings added to the token embeddings (no rotary positions),
LayerNorms with biases before attention and MLP (pre-norm) and after the last layer, a GELU MLP
(GPT-2's tanh approximation), q/k/v and output projections as Conv1D (weights stored input by
output, one fused q/k/v projection with biases), embeddings tied to the lm_head.

Its attention goes through transformers' attention interface as the Llama's does, so the
engine's kernel (gen/family_engine.py: the fp8 KV cache, the split-KV merges) acts on it
unchanged, on keys that carry their positions only through the embeddings they were projected
from; the engine finds each layer's attention as ``transformer.h[i].attn``. Its norms are
LayerNorms, so the bf16 norm fault takes GPT-NeoX's LayerNorm form
(gen/family_gptneox.py `layernorm_bf16`)."""

from __future__ import annotations

from transformers import GPT2Config

from gen.family_size import MAX_CONTEXT, SIZE

LABEL = "gpt2-4x128"  # corpus.json's model: LABEL-bpe<V>


def gpt2_config(vocab: int) -> GPT2Config:
    """SIZE's width, layers, heads (4 of 32) and MLP width in GPT-2's names; every head has its
    own keys and values (GPT-2 has no grouped-query attention: SIZE's KV heads are not used);
    a learned position for each of the family's MAX_CONTEXT positions. No dropout (GPT-2's
    default is 0.1), so that it trains as the other members do; no bos/eos ids (GPT-2's
    default, 50256, is past the BPE, which has no special tokens)."""
    return GPT2Config(
        vocab_size=vocab,
        n_embd=SIZE["hidden_size"],
        n_layer=SIZE["num_hidden_layers"],
        n_head=SIZE["num_attention_heads"],
        n_inner=SIZE["intermediate_size"],
        n_positions=MAX_CONTEXT,
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        scale_attn_weights=True,
        scale_attn_by_inverse_layer_idx=False,
        reorder_and_upcast_attn=False,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
