"""AReaL's rejection sampling (``actor.rejection_sampling``), as
``areal/utils/functional/functional.py`` computes it (inclusionAI/AReaL commit 4aef98d8,
2026-05-21): ``apply_rejection_sampling`` with ``RejectionSamplingConfig`` of
``areal/api/cli_args.py``; its metrics as ``ppo_actor_loss_fn`` and ``areal/trainer/ppo/actor.py``
log them.

Per token ``r = proximal_logprob - old_logprob`` (trainer minus inference; a non-finite ``r`` is
0) and the ``metric``: ``ratio`` = ``exp(r)``, ``kl_k1`` = ``r``, ``kl_k2`` = ``r²/2``, ``kl_k3`` =
``exp(-r) - 1 + r``. ``level=token`` judges each token; ``level=sequence`` judges the sequence by
``agg`` of its tokens (``sum``, ``mean``, ``max``; for ``ratio`` in log space, then
exponentiated), and for ``ratio`` its tokens' weight becomes the geometric mean ``exp(mean r)``.
A value is inside when ``<= upper`` (and ``>= lower`` when set). ``action=mask`` drops what is
outside; ``action=clamp`` (``ratio`` only; ``lower`` defaults to 0) clamps the weight of what is
outside to ``[lower, upper]``.

Metrics: ``rs_filtered_fraction`` (tokens dropped, or whose weight the clamp changed, over the
tokens), ``behave_imp_weight/avg``, ``/min``, ``/max`` and ``behave_approx_kl/avg``, ``/min``,
``/max`` (of ``r``) over the tokens kept with a positive weight, ``unclipped_behave_tokens`` their
count. AReaL averages ``rs_filtered_fraction`` over micro-batches; here the group is one batch.
AReaL computes in float32, this in float64.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from mismatchctl.stats.presets.base import CellPreset, Cells, Config, MetricsPreset, state_fields

LEVELS = ("token", "sequence")
ACTIONS = ("mask", "clamp")
METRICS = ("ratio", "kl_k1", "kl_k2", "kl_k3")
AGGS = ("sum", "mean", "max")
FIELDS = state_fields("filtered", "kept", "w_sum", "w_min", "w_max", "kl_sum", "kl_min", "kl_max")


class ArealRejection(CellPreset, MetricsPreset):
    name = "areal-rejection"
    STATE = FIELDS
    framework = "AReaL (inclusionAI/AReaL commit 4aef98d8d818, 2026-05-21)"
    source = "areal/utils/functional/functional.py"
    describes = (
        "AReaL actor.rejection_sampling: level (token/sequence) x action (mask/clamp) x metric "
        "(ratio, kl_k1, kl_k2, kl_k3) x agg (sum/mean/max) against [lower, upper]"
    )
    clipped_key = "rs_filtered_fraction"
    defaults: ClassVar[Config] = {  # areal/api/cli_args.py, RejectionSamplingConfig
        "level": "token",
        "action": "mask",
        "metric": "ratio",
        "agg": "mean",
        "upper": 5.0,
        "lower": None,
    }

    def check(self, config: Config) -> None:  # RejectionSamplingConfig.__post_init__
        for key, valid in (("level", LEVELS), ("action", ACTIONS), ("metric", METRICS),
                           ("agg", AGGS)):  # fmt: skip
            if config[key] not in valid:
                raise ValueError(f"{key} must be one of {valid}, got '{config[key]}'")
        upper, lower = config["upper"], config["lower"]
        if not isinstance(upper, float) or not (lower is None or isinstance(lower, float)):
            raise ValueError(f"upper `{upper}` and lower `{lower}`: numbers (lower may be null)")
        if lower is not None and lower > upper:
            raise ValueError(f"lower ({lower}) cannot be greater than upper ({upper})")
        metric = config["metric"]
        if metric == "ratio" and upper <= 1.0:
            raise ValueError(f"upper must be > 1.0 for 'ratio' metric, got {upper}")
        if metric == "ratio" and lower is not None and lower <= 0:
            raise ValueError(f"lower must be positive for 'ratio' metric, got {lower}")
        if metric in ("kl_k2", "kl_k3") and upper <= 0:
            raise ValueError(f"upper must be positive for '{metric}' metric, got {upper}")
        if config["action"] == "clamp" and metric != "ratio":
            raise ValueError(f"action='clamp' only supports metric='ratio', got '{metric}'")

    def fill(self, cells: Cells, config: Config) -> tuple[np.ndarray, np.ndarray]:
        chunk = cells.chunk
        with np.errstate(over="ignore", invalid="ignore"):
            raw = chunk.lt - chunk.lr
            r = np.where(np.isfinite(raw), raw, 0.0)
            metric = _metric(raw, config["metric"])
            weight, keep, filtered = rejection(r, metric, chunk.starts, config)
            applied = np.where(keep, weight, 0.0)
        behave = keep & (applied > 0)
        with np.errstate(over="ignore", invalid="ignore"):
            cells.tokens("filtered", filtered)
            cells.tokens("kept", behave)
            cells.tokens("w_sum", np.where(behave, applied, 0.0))
            cells.tokens("kl_sum", np.where(behave, r, 0.0))
        for prefix, values in (("w", applied), ("kl", r)):  # of the tokens kept (behave) only
            cells.extreme(f"{prefix}_min", np.where(behave, values, np.inf), np.minimum)
            cells.extreme(f"{prefix}_max", np.where(behave, values, -np.inf), np.maximum)
        return ~keep, applied

    def metrics(self, v: dict[str, float], config: Config) -> dict[str, Any]:
        n, k = v["tokens"], v["kept"]

        def kept(value: float) -> float | None:  # AReaL drops a statistic of no tokens
            return value if k else None

        return {
            "rs_filtered_fraction": v["filtered"] / max(n, 1.0),
            "behave_imp_weight/avg": kept(v["w_sum"] / max(k, 1.0)),
            "behave_imp_weight/min": kept(v["w_min"]),
            "behave_imp_weight/max": kept(v["w_max"]),
            "behave_approx_kl/avg": kept(v["kl_sum"] / max(k, 1.0)),
            "behave_approx_kl/min": kept(v["kl_min"]),
            "behave_approx_kl/max": kept(v["kl_max"]),
            "unclipped_behave_tokens": int(k),
        }


def _metric(raw: np.ndarray, metric: str) -> np.ndarray:
    """The per-token metric: the ratio of the sanitized log ratio, or KLEstimator's k1/k2/k3
    (unclamped) of the raw one."""
    if metric == "ratio":
        return np.exp(np.where(np.isfinite(raw), raw, 0.0))
    if metric == "kl_k1":
        return raw
    if metric == "kl_k2":
        return raw * raw / 2.0
    return np.exp(-raw) - 1 + raw


def _inside(values: np.ndarray, config: Config) -> np.ndarray:  # _check_bounds
    if config["lower"] is not None:
        return (values >= config["lower"]) & (values <= config["upper"])
    return values <= config["upper"]


def rejection(
    r: np.ndarray, metric: np.ndarray, starts: np.ndarray, config: Config
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """apply_rejection_sampling on whole sequences: each token's weight (before the mask), whether
    it is kept, and whether it counts in ``rs_filtered_fraction``."""
    weight = np.exp(r)
    lower = config["lower"] if config["lower"] is not None else 0.0
    if config["level"] == "sequence":
        ratio = config["metric"] == "ratio"
        values = r if ratio else metric
        lengths = np.diff(starts, append=len(r))
        if ratio:
            weight = np.repeat(np.exp(np.add.reduceat(r, starts) / lengths), lengths)
        agg = config["agg"]
        if agg == "max":
            seq = np.maximum.reduceat(values, starts)
        else:
            seq = np.add.reduceat(values, starts)
            seq = seq / lengths if agg == "mean" else seq
        inside = np.repeat(_inside(np.exp(seq) if ratio else seq, config), lengths)
    else:
        inside = _inside(metric, config)
    if config["action"] == "mask":
        return weight, inside, ~inside
    clamped = np.where(inside, weight, np.clip(weight, lower, config["upper"]))
    return clamped, np.ones(len(r), dtype=bool), clamped != weight
