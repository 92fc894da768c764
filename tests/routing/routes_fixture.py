"""Routes like an MoE model's, for the tests: a seeded router over random hidden states.

Each side takes the top-k of the same router logits, the engine's rounded to bfloat16 precision,
the trainer's in float32, so that the sides disagree where two experts' logits nearly tie, as
real engines and trainers do; nothing is drawn as a flip.
"""

from __future__ import annotations

import numpy as np


def _bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 precision (round to nearest even on the upper 16 bits)."""
    bits = x.astype(np.float32).view(np.uint32)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.view(np.float32)


def routes(
    tokens: int, layers: int = 4, experts: int = 8, top_k: int = 2, seed: int = 0, dim: int = 16
) -> tuple[np.ndarray, np.ndarray]:
    """(engine, trainer) expert ids, int32 [tokens, layers, top_k], top-k in descending order."""
    rng = np.random.default_rng(seed)
    hidden = rng.standard_normal((tokens, layers, dim)).astype(np.float32)
    weight = rng.standard_normal((layers, dim, experts)).astype(np.float32) * 0.05
    logits = np.einsum("tld,lde->tle", hidden, weight)
    engine_logits = np.einsum("tld,lde->tle", _bf16(hidden), _bf16(weight))
    engine_logits = _bf16(engine_logits)
    engine = np.argsort(-engine_logits, axis=2, kind="stable")[:, :, :top_k]
    trainer = np.argsort(-logits, axis=2, kind="stable")[:, :, :top_k]
    return engine.astype(np.int32), trainer.astype(np.int32)
