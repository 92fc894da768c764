"""SkyRL's off-policy correction (``trainer.algorithm.off_policy_correction``), as
``skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py`` computes it (SkyRL 0.3.0,
NovaSky-AI/SkyRL commit a9564572, 2026-08-21): ``compute_off_policy_correction``.

Per token ``ratio = exp(clamp(old_log_prob - rollout_log_prob, -20, 20))``. In SkyRL's order:
the outlier veto drops a whole sequence with any token ratio above
``outlier_token_is_threshold_high`` or below ``outlier_token_is_threshold_low``; the token mask
drops the tokens outside ``[token_mask_is_threshold_low, token_mask_is_threshold_high]`` (both
must be set); TIS (``tis_ratio_type``) weights each token by ``min(ratio,
token_tis_ratio_clip_high)`` or each sequence by ``min(exp(clamp(S, -20, 20)),
sequence_tis_ratio_clip_high)`` with ``S`` the sum of the log ratios of its tokens still kept;
the sequence mask (``sequence_mask_metric``) drops a sequence whose geometric mean ratio (of its
kept tokens) lies outside ``[geo_mask_low, geo_mask_high]`` or whose product lies outside
``[product_mask_low, product_mask_high]``. Each step's denominators are SkyRL's: the token mask
and the token TIS metrics count the tokens still kept, the sequence metrics every sequence.

SkyRL computes the ratio in float32 (``safe_exp_delta``), this in float64; its ``is_ratio_std``
and ``is_ratio_min`` run over its padded micro-batch tensor (padding counts as 0), here over the
tokens only (``is_ratio_std`` unbiased, as torch's ``std``). SkyRL logs the metrics per
micro-batch as ``loss_metrics/<name>``; here the group is one batch.
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

CLAMP = 20.0
TIS_TYPES = (None, "token", "sequence")
SEQ_METRICS = (None, "geometric", "product")
FIELDS = state_fields(
    "ratio_sum", "ratio_sq", "ratio_min", "ratio_max",
    "outlier_seqs", "over_seqs", "under_seqs", "tm_valid", "tm_masked", "tis_valid",
    "tis_capped", "tis_seq_capped", "sm_masked", "sm_over", "sm_under",
)  # fmt: skip
NUMBERS = (
    "token_tis_ratio_clip_high", "sequence_tis_ratio_clip_high", "geo_mask_high", "geo_mask_low",
    "product_mask_high", "product_mask_low",
)  # fmt: skip
OPTIONAL = (
    "outlier_token_is_threshold_low", "outlier_token_is_threshold_high",
    "token_mask_is_threshold_low", "token_mask_is_threshold_high",
)  # fmt: skip


class SkyrlOffPolicy(CellPreset, MetricsPreset):
    name = "skyrl-off-policy"
    STATE = FIELDS
    framework = "SkyRL 0.3.0 (NovaSky-AI/SkyRL commit a9564572eb8e, 2026-08-21)"
    source = "skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py"
    describes = (
        "SkyRL trainer.algorithm.off_policy_correction: outlier-sequence veto, token mask band, "
        "token/sequence TIS clip (tis_ratio_type), geometric/product sequence masks "
        "(sequence_mask_metric), applied in SkyRL's order"
    )
    clipped_key = "tis_token_clip_high_ratio"
    defaults: ClassVar[Config] = {  # skyrl/train/config/config.py, OffPolicyCorrectionConfig
        "tis_ratio_type": None,
        "token_tis_ratio_clip_high": 2.0,
        "sequence_tis_ratio_clip_high": 5.0,
        "sequence_mask_metric": None,
        "geo_mask_high": 1.01,
        "geo_mask_low": 0.99,
        "product_mask_high": 2.0,
        "product_mask_low": 0.5,
        "outlier_token_is_threshold_low": None,
        "outlier_token_is_threshold_high": None,
        "token_mask_is_threshold_low": None,
        "token_mask_is_threshold_high": None,
    }

    def check(self, config: Config) -> None:
        if config["tis_ratio_type"] not in TIS_TYPES:
            raise ValueError(
                f"tis_ratio_type `{config['tis_ratio_type']}`: null, token or sequence"
            )
        if config["sequence_mask_metric"] not in SEQ_METRICS:
            raise ValueError(
                f"sequence_mask_metric `{config['sequence_mask_metric']}`: null, geometric or product"
            )
        require_numbers(config, NUMBERS)
        require_numbers(config, OPTIONAL, nullable=True)
        low, high = config["token_mask_is_threshold_low"], config["token_mask_is_threshold_high"]
        if (low is None) != (high is None):
            raise ValueError(
                "token_mask_is_threshold_low and _high: SkyRL applies the token mask only when "
                "both are set"
            )
        if not _enabled(config):
            raise ValueError("no correction is set: SkyRL's defaults correct nothing")

    def fill(self, cells: Cells, config: Config) -> tuple[np.ndarray, np.ndarray]:
        delta = cells.chunk.lt - cells.chunk.lr
        with np.errstate(over="ignore", invalid="ignore"):
            ratio = np.exp(np.clip(delta, -CLAMP, CLAMP))
            keep = _outlier(ratio, config, cells)
            keep = _token_mask(ratio, keep, config, cells)
            tis = _tis(ratio, delta, keep, config, cells)
            keep = _sequence_mask(delta, keep, config, cells)
            weight = tis * keep
            cells.tokens("ratio_sum", ratio)
            cells.tokens("ratio_sq", ratio * ratio)
        cells.extremes("ratio", ratio)
        return ~keep, weight

    def metrics(self, v: dict[str, float], config: Config) -> dict[str, Any]:
        n = v["tokens"]
        with np.errstate(over="ignore", invalid="ignore"):
            ratio_mean = v["ratio_sum"] / n
            spread = v["ratio_sq"] - n * ratio_mean * ratio_mean
            ratio_std = float(np.sqrt(max(spread, 0.0) / (n - 1))) if n > 1 else None
        out: dict[str, Any] = {
            "is_ratio_mean": ratio_mean,
            "is_ratio_std": ratio_std,
            "is_ratio_max": v["ratio_max"],
            "is_ratio_min": v["ratio_min"],
        }
        return out | _framework_metrics(v, config)


def _framework_metrics(v: dict[str, float], config: Config) -> dict[str, Any]:
    """SkyRL's masking and clipping ratios, each only when SkyRL computes it."""
    m = v["seqs"]
    out: dict[str, Any] = {}
    if _outlier_on(config):
        out["outlier_seq_masked_ratio"] = v["outlier_seqs"] / m
        out["outlier_seq_over_high_ratio"] = v["over_seqs"] / m
        out["outlier_seq_under_low_ratio"] = v["under_seqs"] / m
    if config["token_mask_is_threshold_low"] is not None:
        out["token_mask_ratio"] = v["tm_masked"] / max(v["tm_valid"], 1.0)
    if config["tis_ratio_type"] == "token":
        out["tis_token_clip_high_ratio"] = v["tis_capped"] / max(v["tis_valid"], 1.0)
    elif config["tis_ratio_type"] == "sequence":
        out["tis_seq_clip_high_ratio"] = v["tis_seq_capped"] / m
    metric = config["sequence_mask_metric"]
    if metric is not None:
        prefix = "geo" if metric == "geometric" else "product"
        out[f"{prefix}_sequence_mask_masked_ratio"] = v["sm_masked"] / m
        out[f"{prefix}_sequence_mask_over_high_ratio"] = v["sm_over"] / m
        out[f"{prefix}_sequence_mask_under_low_ratio"] = v["sm_under"] / m
    return out


def _enabled(config: Config) -> bool:  # off_policy_correction_enabled
    return (
        config["tis_ratio_type"] is not None
        or config["sequence_mask_metric"] is not None
        or _outlier_on(config)
        or config["token_mask_is_threshold_low"] is not None
    )


def _outlier_on(config: Config) -> bool:
    return (
        config["outlier_token_is_threshold_low"] is not None
        or config["outlier_token_is_threshold_high"] is not None
    )


def _outlier(ratio: np.ndarray, config: Config, cells: Cells) -> np.ndarray:
    """compute_outlier_token_mask: the tokens kept (a sequence with one outlier is dropped)."""
    if not _outlier_on(config):
        return np.ones(len(ratio), dtype=bool)
    low = config["outlier_token_is_threshold_low"]
    high = config["outlier_token_is_threshold_high"]
    over = ratio > high if high is not None else np.zeros(len(ratio), dtype=bool)
    under = ratio < low if low is not None else np.zeros(len(ratio), dtype=bool)
    seq_over, seq_under = cells.chunk.seq_any(over), cells.chunk.seq_any(under)
    bad = seq_over | seq_under
    cells.seqs("outlier_seqs", bad)
    cells.seqs("over_seqs", seq_over)
    cells.seqs("under_seqs", seq_under)
    return ~cells.chunk.spread(bad)


def _token_mask(ratio: np.ndarray, keep: np.ndarray, config: Config, cells: Cells) -> np.ndarray:
    """compute_token_mask on the tokens the veto kept."""
    low, high = config["token_mask_is_threshold_low"], config["token_mask_is_threshold_high"]
    if low is None or high is None:
        return keep
    inside = (ratio >= low) & (ratio <= high)
    cells.tokens("tm_valid", keep)
    cells.tokens("tm_masked", keep & ~inside)
    return keep & inside


def _tis(
    ratio: np.ndarray, delta: np.ndarray, keep: np.ndarray, config: Config, cells: Cells
) -> np.ndarray:
    """compute_tis_ratio: the TIS weight of each token (1 without TIS)."""
    kind = config["tis_ratio_type"]
    if kind == "token":
        cap = config["token_tis_ratio_clip_high"]
        cells.tokens("tis_valid", keep)
        cells.tokens("tis_capped", keep & (ratio > cap))
        return np.minimum(ratio, cap)
    if kind == "sequence":
        cap = config["sequence_tis_ratio_clip_high"]
        seq_ratio = np.exp(np.clip(cells.chunk.seq_sum(np.where(keep, delta, 0.0)), -CLAMP, CLAMP))
        cells.seqs("tis_seq_capped", seq_ratio > cap)
        return cells.chunk.spread(np.minimum(seq_ratio, cap))
    return np.ones(len(ratio))


def _sequence_mask(delta: np.ndarray, keep: np.ndarray, config: Config, cells: Cells) -> np.ndarray:
    """compute_sequence_mask on the kept tokens: geometric mean or product of the ratios."""
    metric = config["sequence_mask_metric"]
    if metric is None:
        return keep
    total = cells.chunk.seq_sum(np.where(keep, delta, 0.0))
    if metric == "geometric":
        total = total / np.maximum(cells.chunk.seq_sum(keep), 1.0)
        low, high = config["geo_mask_low"], config["geo_mask_high"]
    else:
        low, high = config["product_mask_low"], config["product_mask_high"]
    seq_ratio = np.exp(np.clip(total, -CLAMP, CLAMP))
    over, under = seq_ratio > high, seq_ratio < low
    cells.seqs("sm_masked", over | under)
    cells.seqs("sm_over", over)
    cells.seqs("sm_under", under)
    return keep & ~cells.chunk.spread(over | under)
