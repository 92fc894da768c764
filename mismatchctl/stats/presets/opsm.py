"""slime's and miles' Off-Policy Sequence Masking (``--use-opsm``, ``--opsm-delta``; DeepSeek-V3.2's
OPSM), as ``compute_opsm_mask`` computes it in ``slime/utils/ppo_utils.py`` (THUDM/slime commit
624b824a, 2026-08-21) and, identically, in ``miles/backends/training_utils/loss_hub/math_utils.py``
(radixark/miles commit 31f1ca96, 2026-08-21); ``policy_loss_function`` multiplies the policy
gradient loss by the mask.

Per sample, ``seq_kl = Σ (old_log_prob - log_prob) · loss_mask / max(Σ loss_mask, 1)`` and every
token whose advantage is negative is masked when ``seq_kl > opsm_delta``. The mismatch enters it
when slime runs with ``--use-rollout-logprobs`` (``old_log_prob`` is the rollout's) and
``log_prob`` is the trainer's, as at the first update on a batch: ``seq_kl`` is then the mean of
``rollout - trainer`` = ``-r`` over the sequence's model tokens. (Without that flag the old
log-probabilities are the trainer's own and OPSM measures the policy's drift over the updates,
which no dump holds.)

The store holds no advantages. GRPO gives every token of a sequence its sequence's advantage, so
``advantage_sign`` (not a slime key) states the sign assumed for every sequence: ``negative``
(the default) is OPSM's upper bound, every sequence whose ``seq_kl`` exceeds the threshold is
masked; ``positive`` masks nothing, since OPSM never masks a positive (or zero) advantage.
``opsm_seq_kl_over_delta_fraction`` (not a slime metric) gives the share of sequences over the
threshold either way: the share OPSM masks among the negative-advantage ones.

``opsm_clipfrac`` is slime's metric under its default per-rollout mean (``calculate_per_token_loss``
off): the masked share of sequences. slime adds ``L / M`` per masked sample (``L`` its response
tokens, ``M`` those in the loss mask), so a masked sample with tool-response tokens counts more
than once there; here each masked sequence counts once. slime computes in float32, this in
float64.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from mismatchctl.stats.presets.base import (
    CellPreset,
    Cells,
    Config,
    MetricsPreset,
    require_numbers,
    state_fields,
)

SIGNS = ("negative", "positive")
FIELDS = state_fields("over")


class SlimeOpsm(CellPreset, MetricsPreset):
    name = "slime-opsm"
    STATE = FIELDS
    framework = (
        "slime (THUDM/slime commit 624b824a898a, 2026-08-21); miles (radixark/miles commit "
        "31f1ca961a94, 2026-08-21)"
    )
    source = "slime/utils/ppo_utils.py"
    describes = (
        "slime/miles --use-opsm: a sequence of negative advantage is masked when its mean "
        "rollout - trainer log-ratio exceeds opsm_delta (advantage_sign: the sign assumed)"
    )
    clipped_key = None
    defaults: ClassVar[Config] = {  # slime/utils/arguments.py (miles/utils/arguments.py)
        "opsm_delta": 1e-4,
        "advantage_sign": "negative",  # not a slime key: the store holds no advantages
    }

    def check(self, config: Config) -> None:
        if config["advantage_sign"] not in SIGNS:
            raise ValueError(f"advantage_sign `{config['advantage_sign']}`: negative or positive")
        require_numbers(config, ("opsm_delta",))

    def fill(self, cells: Cells, config: Config) -> tuple[np.ndarray, np.ndarray]:
        chunk = cells.chunk
        over = opsm_over(chunk.lr, chunk.lt, chunk.starts, config["opsm_delta"])
        seq_masked = over & (config["advantage_sign"] == "negative")
        keep = chunk.spread(~seq_masked).astype(np.float64)
        cells.seqs("over", over)
        return 1.0 - keep, keep  # the weight: 1 kept, 0 masked

    def metrics(self, v: dict[str, float], config: Config) -> dict[str, Any]:
        m = v["seqs"]
        return {
            "opsm_clipfrac": v["seq_masked"] / m,
            "opsm_seq_kl_over_delta_fraction": v["over"] / m,
        }


def opsm_over(lr: np.ndarray, lt: np.ndarray, starts: np.ndarray, delta: float) -> np.ndarray:
    """Per sequence: whether slime's ``seq_kl`` (the mean of ``rollout - trainer`` over its model
    tokens) exceeds ``delta``."""
    lengths = np.diff(starts, append=len(lr))
    seq_kl = np.add.reduceat(lr - lt, starts) / np.maximum(lengths, 1)
    return seq_kl > delta
