"""slime's truncated importance sampling and IcePop masking (``--use-tis``), as
``slime/backends/megatron_utils/loss.py`` computes them (THUDM/slime commit 624b824a,
2026-08-21): ``vanilla_tis_function`` (``w = clamp(rho, tis_clip_low, tis_clip)``) and
``icepop_function`` (``w = rho`` inside ``[tis_clip_low, tis_clip]``, else 0), chosen by
``custom_tis_function_path``; ``rho = exp(old_log_prob - rollout_log_prob)``, not clamped.

Its metrics ``tis`` (the ratio), ``tis_clipfrac`` (tokens whose weight is not their ratio) and
``tis_abs`` (``|rho - 1|``) are reduced by ``sum_of_sample_mean``: each sample's token mean, then
(as the logged value) the mean over samples. The per-rollout denominators slime uses when
``rollout_mask_sums`` is set are not reproduced; slime computes in float32, this in float64.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from mismatchctl.stats.presets.base import CellPreset, Cells, Config, MetricsPreset, state_fields

VANILLA = "slime.backends.megatron_utils.loss.vanilla_tis_function"
ICEPOP = "slime.backends.megatron_utils.loss.icepop_function"
FIELDS = state_fields("tis_seq_sum", "clipfrac_seq_sum", "abs_seq_sum")


class SlimeTis(CellPreset, MetricsPreset):
    name = "slime-tis"
    STATE = FIELDS
    framework = "slime (THUDM/slime commit 624b824a898a, 2026-08-21)"
    source = "slime/backends/megatron_utils/loss.py"
    describes = (
        "slime --use-tis: vanilla_tis_function (w = clamp(rho, tis_clip_low, tis_clip)) or, with "
        "custom_tis_function_path = ...icepop_function, IcePop (w = rho inside the band, else 0)"
    )
    clipped_key = "tis_clipfrac"
    defaults: ClassVar[Config] = {  # slime/utils/arguments.py
        "tis_clip": 2.0,
        "tis_clip_low": 0.0,
        "custom_tis_function_path": None,
    }

    def check(self, config: Config) -> None:
        path = config["custom_tis_function_path"]
        if path not in (None, VANILLA, ICEPOP):
            raise ValueError(f"custom_tis_function_path `{path}`: null, {VANILLA} or {ICEPOP}")
        lo, hi = config["tis_clip_low"], config["tis_clip"]
        if not (isinstance(lo, float) and isinstance(hi, float) and 0 <= lo <= hi):
            raise ValueError(f"tis_clip_low {lo} and tis_clip {hi}: numbers, 0 <= low <= high")

    def fill(self, cells: Cells, config: Config) -> tuple[np.ndarray, np.ndarray]:
        chunk = cells.chunk
        with np.errstate(over="ignore", invalid="ignore"):  # an overflowing ratio stays inf
            rho = np.exp(chunk.lt - chunk.lr)
            lo, hi = config["tis_clip_low"], config["tis_clip"]
            if config["custom_tis_function_path"] == ICEPOP:
                weight = np.where((rho >= lo) & (rho <= hi), rho, 0.0)
                masked = (weight != rho).astype(np.float64)
            else:
                weight = np.clip(rho, lo, hi)
                masked = np.zeros(len(rho))
            clipped = (weight != rho).astype(np.float64)
            cells.seqs("tis_seq_sum", chunk.seq_mean(rho))
            cells.seqs("clipfrac_seq_sum", chunk.seq_mean(clipped))
            cells.seqs("abs_seq_sum", chunk.seq_mean(np.abs(rho - 1)))
        return masked, weight

    def metrics(self, v: dict[str, float], config: Config) -> dict[str, Any]:
        m = v["seqs"]
        return {
            "tis": v["tis_seq_sum"] / m,
            "tis_clipfrac": v["clipfrac_seq_sum"] / m,
            "tis_abs": v["abs_seq_sum"] / m,
        }
