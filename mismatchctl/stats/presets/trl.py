"""TRL's vLLM importance-sampling correction of GRPO (``vllm_importance_sampling_correction``),
as ``trl/trainer/grpo_trainer.py`` computes it in ``_generate_and_score_completions`` (TRL 1.16.0;
first transcribed from TRL 1.10.0.dev0, commit f2cd5771, whose arithmetic is the same):
``logps_diff = old_per_token_logps - sampling_per_token_logps`` per token, or its sum over the
sequence for the ``sequence_*`` modes; ``ratio = exp(logps_diff)`` (not clamped); ``*_truncate``
clamps it to ``[clip_min, clip_max]``, ``*_mask`` sets it to 0 outside (a None bound is open).

Its metrics, as one process logs them: ``sampling/sampling_logp_difference/mean`` and ``/max``
(of ``|old - sampling|`` over the completion tokens) and ``sampling/importance_sampling_ratio/min``,
``/mean``, ``/max`` of the corrected ratios over tokens (token modes) or sequences (sequence
modes). TRL averages per-process means across processes; here the group is one process. TRL
1.16 counts a token whose sampling log-probability is NaN (vLLM gave none) as ratio 1 and leaves
it out of the difference metrics; such a token is not in the store (ingest reports non-finite
log-probabilities).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from mismatchctl.stats.presets.base import CellPreset, Cells, Config, MetricsPreset, state_fields

MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
FIELDS = state_fields("delta_sum", "delta_max", "ratio_n", "ratio_sum",
                      "ratio_min", "ratio_max")  # fmt: skip
P = "sampling/"


class TrlVllmIs(CellPreset, MetricsPreset):
    name = "trl-vllm-is"
    STATE = FIELDS
    framework = "TRL 1.16.0 (GRPOTrainer._generate_and_score_completions)"
    source = "trl/trainer/grpo_trainer.py"
    describes = (
        "TRL GRPO vllm_importance_sampling_correction: token/sequence ratios truncated to or "
        "masked outside [clip_min, clip_max] (vllm_importance_sampling_mode)"
    )
    clipped_key = None
    defaults: ClassVar[Config] = {  # trl/trainer/grpo_config.py
        "vllm_importance_sampling_correction": True,
        "vllm_importance_sampling_mode": "sequence_mask",
        "vllm_importance_sampling_clip_max": 3.0,
        "vllm_importance_sampling_clip_min": None,
    }

    def check(self, config: Config) -> None:
        mode = config["vllm_importance_sampling_mode"]
        if mode not in MODES:
            raise ValueError(f"vllm_importance_sampling_mode `{mode}`: {', '.join(MODES)}")
        lo = config["vllm_importance_sampling_clip_min"]
        hi = config["vllm_importance_sampling_clip_max"]
        if lo is not None and hi is not None and lo >= hi:
            raise ValueError(
                f"vllm_importance_sampling_clip_min ({lo}) must be less than clip_max ({hi})"
            )
        if mode.endswith("truncate") and lo is None and hi is None:
            raise ValueError("a *_truncate mode needs clip_min or clip_max")
        if config["vllm_importance_sampling_correction"] is not True:
            raise ValueError("vllm_importance_sampling_correction is off: TRL corrects nothing")

    def fill(self, cells: Cells, config: Config) -> tuple[np.ndarray, np.ndarray]:
        chunk = cells.chunk
        mode = config["vllm_importance_sampling_mode"]
        diff = chunk.lt - chunk.lr
        sequence = mode.startswith("sequence")
        with np.errstate(over="ignore", invalid="ignore"):  # an overflowing ratio stays inf
            ratio = np.exp(chunk.seq_sum(diff) if sequence else diff)
            corrected, masked = _constrain(ratio, mode, config)
        unit = cells.seqs if sequence else cells.tokens
        unit("ratio_n", np.ones(len(ratio)))
        unit("ratio_sum", corrected)
        cells.extremes("ratio", corrected, per_seq=sequence)
        delta = np.abs(diff)
        cells.tokens("delta_sum", delta)
        cells.extreme("delta_max", delta, np.maximum)
        if sequence:  # a sequence's ratio is each of its tokens' weight
            return chunk.spread(masked), chunk.spread(corrected)
        return masked, corrected

    def metrics(self, v: dict[str, float], config: Config) -> dict[str, Any]:
        n, k = v["tokens"], v["ratio_n"]
        return {
            f"{P}sampling_logp_difference/mean": v["delta_sum"] / n,
            f"{P}sampling_logp_difference/max": v["delta_max"],
            f"{P}importance_sampling_ratio/min": v["ratio_min"],
            f"{P}importance_sampling_ratio/mean": v["ratio_sum"] / k,
            f"{P}importance_sampling_ratio/max": v["ratio_max"],
        }


def _constrain(ratio: np.ndarray, mode: str, config: Config) -> tuple[np.ndarray, np.ndarray]:
    """The corrected ratios and which were masked (set to 0), as TRL's mode says."""
    lo = config["vllm_importance_sampling_clip_min"]
    hi = config["vllm_importance_sampling_clip_max"]
    if mode.endswith("truncate"):
        return np.clip(ratio, lo, hi), np.zeros(len(ratio))
    low = -np.inf if lo is None else lo
    high = np.inf if hi is None else hi
    invalid = (ratio < low) | (ratio > high)
    return np.where(invalid, 0.0, ratio), invalid.astype(np.float64)
