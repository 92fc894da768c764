"""Faults of kinds no threshold of `diagnose` was set on, for the family's members (family.py
--unseen): the engine builds another model than the trainer from the same weights, a config
setting read otherwise on its side (gen/family_config_edits.py), each a reported class of
training-inference mismatch, at the size the member gives it (none is scaled); and two
combinations of one with a calibrated fault. Each run's planted class is the fix a user should be
told to make:

- a function that differs only where the context is long (keys past a sliding window, positions
  past a rotary scaling's start) or whose error grows with the position (rotary dimensions the
  checkpoint leaves unrotated, rotary frequencies rounded to bf16): the engine's configuration
  or arithmetic, a ``code_path``;
- every token's logits moved a little (an activation's approximation, a norm's epsilon): a
  ``precision`` loss;
- the engine's logits transformed before its logprobs (a soft-cap skipped, a logit scale not
  applied): ``semantics``.

Every member's corpus holds the family's two healthy baselines (``f-h-a``, ``f-h-b``) and the
runs of its architecture (``UNSEEN[arch]``)."""

from __future__ import annotations

from gen.family_engine import Sampler
from gen.family_runs import FAMILY, FP8KV, FamilyRun, fault

BASELINES: tuple[FamilyRun, ...] = tuple(r for r in FAMILY if r.name in ("f-h-a", "f-h-b"))

_ROPE_DYNAMIC = fault(
    "f-u-rope-dynamic",
    "code_path",
    "natural",
    "the engine's rotary embedding dynamic NTK (factor 2) from position 128; the trainer's plain",
    engine_config="rope-dynamic",
)
_NORM_EPS = fault(
    "f-u-norm-eps",
    "precision",
    "natural",
    "the engine's norm epsilon ten times the checkpoint's",
    engine_config="norm-eps",
)
_ROPE_BF16 = fault(
    "f-u-rope-bf16",
    "code_path",
    "natural",
    "the engine's rotary frequencies in bf16 (the model cast whole), the trainer's in fp32",
    engine_config="rope-bf16",
)
_COMBO_ROPE_STALE = fault(
    "f-u-combo-rope-stale",
    "code_path+policy",
    "natural",
    "dynamic NTK rotary on the engine from position 128, its weights one RL step behind",
    engine_config="rope-dynamic",
    weights="stale",
)

UNSEEN: dict[str, tuple[FamilyRun, ...]] = {
    "llama": (_ROPE_DYNAMIC, _NORM_EPS, _ROPE_BF16, _COMBO_ROPE_STALE),
    "qwen3": (_ROPE_DYNAMIC, _NORM_EPS, _ROPE_BF16),
    "qwen2": (_ROPE_DYNAMIC, _NORM_EPS, _ROPE_BF16),
    "olmo2": (_ROPE_DYNAMIC, _NORM_EPS, _ROPE_BF16),
    "gemma2": (
        fault(
            "f-u-window-off",
            "code_path",
            "natural",
            "the engine attends every key on the sliding-window (128) layers",
            engine_config="window-off",
        ),
        fault(
            "f-u-final-softcap-off",
            "semantics",
            "natural",
            "the engine skips the final-logit soft-capping (30)",
            engine_config="final-softcap-off",
        ),
        fault(
            "f-u-gelu-exact",
            "precision",
            "natural",
            "the engine's GeGLU with the exact GELU, the checkpoint's the tanh approximation",
            engine_config="gelu-exact",
        ),
        fault(
            "f-u-combo-window-fp8kv",
            "code_path+precision",
            "natural",
            "no sliding window on the engine and an fp8 KV cache (scale 1)",
            engine_config="window-off",
            kernel=FP8KV,
        ),
        _ROPE_BF16,
    ),
    "gptneox": (
        fault(
            "f-u-rotary-full",
            "code_path",
            "natural",
            "the engine rotates the whole of each head, the checkpoint a quarter (rotary_pct)",
            engine_config="rotary-full",
        ),
        fault(
            "f-u-combo-rotary-topp",
            "code_path+semantics",
            "natural",
            "the whole head rotated on the engine and top-p 0.9 renormalised in its logprobs",
            engine_config="rotary-full",
            sampler=Sampler(top_p=0.9),
        ),
        _ROPE_BF16,
    ),
    "cohere": (
        fault(
            "f-u-logit-scale-off",
            "semantics",
            "natural",
            "the engine does not apply the logit scale (1/16): its logits 16 times the trainer's",
            engine_config="logit-scale-off",
        ),
        _ROPE_DYNAMIC,
        _NORM_EPS,
        _ROPE_BF16,
    ),
    "gpt2": (),
    "phi": (_NORM_EPS, _ROPE_BF16),
    "granite": (
        fault(
            "f-u-logits-scaling-off",
            "semantics",
            "natural",
            "the engine does not divide the logits by the logits scaling (8): its logits 8 times "
            "the trainer's",
            engine_config="logits-scaling-off",
        ),
        _ROPE_DYNAMIC,
        _NORM_EPS,
        _ROPE_BF16,
    ),
}


def unseen_catalogue(arch: str) -> tuple[FamilyRun, ...]:
    """The two healthy baselines and the member's runs of kinds never calibrated."""
    return BASELINES + UNSEEN[arch]
