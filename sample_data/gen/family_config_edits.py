"""How an engine can build another model than the trainer from the same weights: a setting of the
model's config read differently on the engine's side (a port that ignores it, a default that
differs, a scaling only one side applies). Each edit takes the trainer's config and returns the
engine's; gen/family_runs.py builds the engine from it (`FamilyRun.engine_config`) and the
trainer from the original. These are faults of kinds no threshold of `diagnose` was set on
(gen/family_unseen.py's catalogue), each a reported class of training-inference mismatch:

- ``window-off``: the engine attends every key on the sliding-window layers (an engine without
  sliding-window support serving a Gemma2): tokens past the window (128 keys) see more context;
- ``final-softcap-off``: the engine skips Gemma2's final-logit soft-capping (30): large logits
  are no longer squashed, so confident tokens grow more confident (a logit transform on one side);
- ``gelu-exact``: the engine's GeGLU with the exact GELU where the checkpoint's is the tanh
  approximation (``hidden_activation`` read as ``gelu``): every activation moves a little;
- ``rope-dynamic``: the engine's rotary embedding is dynamic NTK (factor 2) from position 128 on:
  a forward whose positions pass 128 rotates at another base, recomputed with its length (a
  later turn's prefill whole, each decode step past 128; the cached keys keep the base they were
  rotated at);
- ``norm-eps``: the engine's norm epsilon ten times the checkpoint's (an RMSNorm's 1e-5 where
  it is 1e-6, Cohere's LayerNorm 1e-4 where it is 1e-5);
- ``rotary-full``: GPT-NeoX's rotary positions on the whole head where the checkpoint rotates a
  quarter of it (``rotary_pct`` dropped);
- ``rope-bf16``: the engine keeps its rotary frequencies in bf16, as a model cast whole to bf16
  holds them (``build`` keeps them in fp32, as engines compute their angles): every angle's
  error grows with the distance between query and key;
- ``logit-scale-off``: Cohere's logit scale (1/16) not applied by the engine: its logits are 16
  times the trainer's, a temperature of 1/16 that only the engine's sampler sees;
- ``logits-scaling-off``: Granite's logits scaling (a division by 8) not applied by the engine
  (a port of the Llama it resembles): its logits 8 times the trainer's."""

from __future__ import annotations

import copy
from collections.abc import Callable

from transformers import PretrainedConfig

DYNAMIC_FROM = 128  # rope-dynamic: the engine's original context, past which NTK scaling starts


def _window_off(c: PretrainedConfig) -> None:
    c.layer_types = ["full_attention"] * c.num_hidden_layers


def _final_softcap_off(c: PretrainedConfig) -> None:
    c.final_logit_softcapping = None


def _gelu_exact(c: PretrainedConfig) -> None:
    c.hidden_activation = "gelu"


def _rope_dynamic(c: PretrainedConfig) -> None:
    """transformers' dynamic NTK scales from the config's ``max_position_embeddings``: the
    engine's config says 128 (a model card's original context), the trainer's the family's
    1024, which no rollout reaches."""
    c.rope_parameters = {**c.rope_parameters, "rope_type": "dynamic", "factor": 2.0}
    c.max_position_embeddings = DYNAMIC_FROM


def _norm_eps(c: PretrainedConfig) -> None:
    name = "rms_norm_eps" if hasattr(c, "rms_norm_eps") else "layer_norm_eps"
    setattr(c, name, getattr(c, name) * 10)


def _rotary_full(c: PretrainedConfig) -> None:
    c.rope_parameters = {**c.rope_parameters, "partial_rotary_factor": 1.0}


def _rope_bf16(c: PretrainedConfig) -> None:
    c.rotary_in_dtype = True


def _logit_scale_off(c: PretrainedConfig) -> None:
    c.logit_scale = 1.0


def _logits_scaling_off(c: PretrainedConfig) -> None:
    c.logits_scaling = 1.0


EDITS: dict[str, Callable[[PretrainedConfig], None]] = {
    "window-off": _window_off,
    "final-softcap-off": _final_softcap_off,
    "gelu-exact": _gelu_exact,
    "rope-dynamic": _rope_dynamic,
    "norm-eps": _norm_eps,
    "rotary-full": _rotary_full,
    "rope-bf16": _rope_bf16,
    "logit-scale-off": _logit_scale_off,
    "logits-scaling-off": _logits_scaling_off,
}


def engine_config(config: PretrainedConfig, edit: str) -> PretrainedConfig:
    """The engine's config: a copy of ``config`` with ``edit`` applied ("" leaves it as is)."""
    if not edit:
        return config
    out = copy.deepcopy(config)
    EDITS[edit](out)
    return out
