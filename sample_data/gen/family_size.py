"""The size every dense member of the family shares (gen/family_model.py's Llama,
gen/family_gemma2.py, gen/family_qwen3.py): one size, so that what differs between them is the
architecture's numerics, not its capacity."""

from __future__ import annotations

MAX_CONTEXT = 1024  # every member's max_position_embeddings

SIZE: dict[str, int] = {
    "hidden_size": 128,
    "intermediate_size": 352,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": MAX_CONTEXT,
}
"""Width 128, 4 layers, 4 query heads over 2 key-value heads of 32, SwiGLU or GeGLU of 352."""


NO_SPECIAL_IDS: dict[str, object] = {
    "pad_token_id": None,
    "bos_token_id": None,
    "eos_token_id": None,
    "attn_implementation": "sdpa",
}
"""The config settings the later members share: no pad, bos or eos ids (their defaults are the
BPE's ids or past the vocabulary; the runs' stop tokens are the family's own) and transformers'
sdpa attention, which the engine's kernel replaces (gen/family_engine.py)."""
