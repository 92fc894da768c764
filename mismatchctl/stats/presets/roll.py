"""ROLL's train-infer correction (``train_infer_correction``), as
``roll/utils/train_infer_corrections.py`` computes it (alibaba/ROLL commit 8eb27cc2, 2026-08-19):
``compute_train_infer_correction`` with ``TrainInferCorrectionConfig`` of
``roll/configs/base_config.py`` and ``compute_segment_masked_mean`` of
``roll/pipeline/agentic/utils.py``.

Per token ``r = old_log_prob - infer_log_prob`` and ``Δp = exp(old) - exp(infer)``; at four
granularities, broadcast to the tokens: ``token`` (``exp(r)``, ``Δp``), ``geometric`` (``exp`` of
the sequence's mean ``r``; the sequence's mean ``Δp``), ``sequence`` (``exp`` of its sum, not
clamped; the sum of ``Δp``) and ``segment`` (the same means over the token's turn: a maximal run of
model tokens, ROLL's run of ``response_mask`` ones). ROLL's ``masked_mean`` adds 1e-8 to the count
of an integer mask in float32, where it vanishes: means divide by the count; the mean over
sequences divides by their count plus 1e-8 (a float64 sum). The IS weight (``is_weight.*``) is the ratio at ``weight_type``, clamped
to ``[0, upper_bound]``; the filter (``filters.0.*``, ROLL's first filter rule) keeps a token
whose ratio at ``agg_type`` lies in ``[ratio_low, ratio_high]`` and (``diff_enabled``) whose Δp
lies in ``[diff_low, diff_high]``.

Metrics: ``actor/train_infer_{ratio,diff}_<granularity>_mean@sum`` (ROLL logs them always: mean
over sequences of each sequence's token mean), ``actor/is_weight_clipfrac@sum``,
``actor/train_infer_<agg>_{ratio,diff}_mask_mean@sum`` (pass rates) and
``actor/train_infer_final_mask_mean``. ROLL's token means sum over its padded tensor, padding
included (a padded position of a sequence-level weight counts as that sequence's); here they run
over the tokens only.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from mismatchctl.stats.presets.base import (
    CellPreset,
    Cells,
    Chunk,
    Config,
    MetricsPreset,
    require_numbers,
    state_fields,
)

EPS = 1e-8
GRAINS = ("token", "geometric", "sequence", "segment")
P = "actor/"
FIELDS = state_fields(
    "clip", "ratio_pass", "diff_pass",
    *(f"{kind}_{g}" for kind in ("ratio", "diff") for g in GRAINS),
)  # fmt: skip
F = "filters.0."


class RollTrainInfer(CellPreset, MetricsPreset):
    name = "roll-train-infer"
    framework = "ROLL (alibaba/ROLL commit 8eb27cc2dc34, 2026-08-19)"
    source = "roll/utils/train_infer_corrections.py"
    describes = (
        "ROLL train_infer_correction: IS weight at token/segment/geometric/sequence granularity "
        "clamped to upper_bound, and a filter on the ratio and on Δp = exp(old) - exp(infer) at "
        "one granularity (ROLL's first filter rule); its train_infer_* metrics"
    )
    clipped_key = f"{P}is_weight_clipfrac@sum"
    uses_turns = True
    STATE = FIELDS
    defaults: ClassVar[Config] = {  # roll/configs/base_config.py, TrainInfer*Config
        "is_weight.enabled": False,
        "is_weight.weight_type": "token",
        "is_weight.upper_bound": 1.2,
        f"{F}enabled": False,
        f"{F}agg_type": "token",
        f"{F}ratio_enabled": True,
        f"{F}ratio_low": 0.8,
        f"{F}ratio_high": 1.2,
        f"{F}diff_enabled": False,
        f"{F}diff_low": -0.2,
        f"{F}diff_high": 0.2,
    }

    def check(self, config: Config) -> None:
        for key in ("is_weight.weight_type", f"{F}agg_type"):
            if config[key] not in GRAINS:
                raise ValueError(f"{key} `{config[key]}`: one of {', '.join(GRAINS)}")
        for key in ("is_weight.enabled", f"{F}enabled", f"{F}ratio_enabled", f"{F}diff_enabled"):
            if not isinstance(config[key], bool):
                raise ValueError(f"{key} `{config[key]}`: true or false")
        numbers = [f"{F}{k}" for k in ("ratio_low", "ratio_high", "diff_low", "diff_high")]
        require_numbers(config, numbers)
        require_numbers(config, ("is_weight.upper_bound",), nullable=True)

    def fill(self, cells: Cells, config: Config) -> tuple[np.ndarray, np.ndarray]:
        chunk = cells.chunk
        with np.errstate(over="ignore", invalid="ignore"):
            ratio, diff = granularities(chunk.lr, chunk.lt, chunk.starts, _segment_starts(chunk))
            for kind, values in (("ratio", ratio), ("diff", diff)):
                for g in GRAINS:  # seq-mean-token-mean: the sequences' token means, summed
                    cells.seqs(f"{kind}_{g}", chunk.seq_mean(values[g]))
            weight = _is_weight(ratio, config, cells.tokens)
            keep = _filter(ratio, diff, config, cells.tokens)
            return ~keep, weight * keep

    def metrics(self, v: dict[str, float], config: Config) -> dict[str, Any]:
        n, m = v["tokens"], v["seqs"]
        out: dict[str, Any] = {}
        for kind in ("ratio", "diff"):
            for g in GRAINS:
                out[f"{P}train_infer_{kind}_{g}_mean@sum"] = v[f"{kind}_{g}"] / (m + EPS)
        if config["is_weight.enabled"] and config["is_weight.upper_bound"] is not None:
            out[f"{P}is_weight_clipfrac@sum"] = v["clip"] / n
        if config[f"{F}enabled"]:
            agg = config[f"{F}agg_type"]
            if config[f"{F}ratio_enabled"]:
                out[f"{P}train_infer_{agg}_ratio_mask_mean@sum"] = v["ratio_pass"] / n
            if config[f"{F}diff_enabled"]:
                out[f"{P}train_infer_{agg}_diff_mask_mean@sum"] = v["diff_pass"] / n
            out[f"{P}train_infer_final_mask_mean"] = (n - v["masked"]) / n
        return out


def _segment_starts(chunk: Chunk) -> np.ndarray:
    """The first row of each segment: a sequence's tokens of one turn (the whole sequence when
    the chunk has no turns)."""
    new = np.zeros(len(chunk.seq), dtype=bool)
    new[chunk.starts] = True
    if chunk.turn is not None:
        new[1:] |= chunk.turn[1:] != chunk.turn[:-1]
    return np.flatnonzero(new)


def granularities(
    lr: np.ndarray, lt: np.ndarray, starts: np.ndarray, seg_starts: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """_compute_all_granularity: the ratio and Δp of each token at each granularity."""
    r = lt - lr
    delta = np.exp(lt) - np.exp(lr)
    lengths = np.diff(starts, append=len(r))
    seg_lengths = np.diff(seg_starts, append=len(r))

    def seq_sum(x: np.ndarray) -> np.ndarray:
        return np.add.reduceat(x, starts)

    def seq_mean(x: np.ndarray) -> np.ndarray:
        return seq_sum(x) / lengths

    def seg_mean(x: np.ndarray) -> np.ndarray:
        return np.repeat(np.add.reduceat(x, seg_starts) / seg_lengths, seg_lengths)

    ratio = {
        "token": np.exp(r),
        "geometric": np.repeat(np.exp(seq_mean(r)), lengths),
        "sequence": np.repeat(np.exp(seq_sum(r)), lengths),
        "segment": np.exp(seg_mean(r)),
    }
    diff = {
        "token": delta,
        "geometric": np.repeat(seq_mean(delta), lengths),
        "sequence": np.repeat(seq_sum(delta), lengths),
        "segment": seg_mean(delta),
    }
    return ratio, diff


def _is_weight(ratio: dict[str, np.ndarray], config: Config, put: Any) -> np.ndarray:
    """The IS weight of each token (1 when ``is_weight.enabled`` is false)."""
    if not config["is_weight.enabled"]:
        return np.ones(len(ratio["token"]))
    weight = ratio[config["is_weight.weight_type"]]
    upper = config["is_weight.upper_bound"]
    if upper is None:
        return weight
    put("clip", weight > upper)
    return np.clip(weight, 0.0, upper)


def _filter(
    ratio: dict[str, np.ndarray], diff: dict[str, np.ndarray], config: Config, put: Any
) -> np.ndarray:
    """Whether each token passes the filter (all pass when ``filters.0.enabled`` is false)."""
    keep = np.ones(len(ratio["token"]), dtype=bool)
    if not config[f"{F}enabled"]:
        return keep
    agg = config[f"{F}agg_type"]
    if config[f"{F}ratio_enabled"]:
        passed = (ratio[agg] >= config[f"{F}ratio_low"]) & (ratio[agg] <= config[f"{F}ratio_high"])
        put("ratio_pass", passed)
        keep &= passed
    if config[f"{F}diff_enabled"]:
        passed = (diff[agg] >= config[f"{F}diff_low"]) & (diff[agg] <= config[f"{F}diff_high"])
        put("diff_pass", passed)
        keep &= passed
    return keep
