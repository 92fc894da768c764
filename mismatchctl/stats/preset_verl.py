"""verl's rollout correction (``algorithm.rollout_correction``), as
``verl/trainer/ppo/rollout_corr_helper.py`` computes it (verl 0.8.0.dev, commit b178a3cd,
2026-01-29): ``compute_rollout_correction_weights`` + ``compute_is_metrics`` (IS weights of
``rollout_is`` = token / sequence, truncated at ``rollout_is_threshold``) and
``compute_rollout_rejection_mask`` (the ``rollout_rs`` options, comma-separated, all of which must
pass, with ``rollout_rs_threshold``). ``log_ratio = old_log_prob - rollout_log_prob`` (r).

Reported per group, under verl's names (``rollout_corr/...``): the IS weights' mean, max, min,
std, ESS, ratio fractions high/low and per-sequence statistics (before truncation, as verl logs
them), the rejection masks' token and sequence masked fractions per option and combined. verl
computes them per training batch: a ``(run, step)`` group gives the number of its chart. Of
``compute_rs_metrics`` (the statistics of each rejection criterion) only the masked fractions are
reproduced. verl's masked means divide by the count plus 1e-8 and so do these; its fractions
of sequences are float32 in verl (``.float().mean()``), float64 here.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from mismatchctl.stats import registry as M
from mismatchctl.stats.presets import (
    Config,
    Layout,
    per_cell_extreme,
    per_cell_sum,
    sequence_starts,
)

SAFETY_BOUND = 20.0  # verl: ratios are exp(clamp(log ratio, -20, 20))
EPS = 1e-8  # verl_F.masked_mean divides by (mask count + 1e-8): kept, so the numbers are verl's
RS_OPTIONS = (
    "token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3",
)  # fmt: skip
IS_FIELDS = [
    "w_sum", "high", "low", "w_max", "w_min", "s_max", "s_min", "wc_sum",
    "wc2_sum", "seq_d_sum", "seq_d2_sum", "seq_max", "seq_min", "seq_high", "seq_low",
]  # fmt: skip
COMMON_FIELDS = [
    "tokens",
    "seqs",
    "masked",
    "seq_masked",
    "app_sum",
    "app_sq",
    "app_min",
    "app_max",
]
P = "rollout_corr/"


def rs_options(config: Config) -> list[str]:
    """The ``rollout_rs`` options, checked as verl checks them."""
    spec = config.get("rollout_rs")
    if spec is None:
        return []
    options = list(dict.fromkeys(o.strip() for o in str(spec).split(",") if o.strip()))
    bad = [o for o in options if o not in RS_OPTIONS]
    if bad or not options:
        raise ValueError(f"rollout_rs `{spec}`: options are {', '.join(RS_OPTIONS)}")
    return options


def rs_thresholds(options: list[str], spec: Any) -> dict[str, tuple[float | None, float]]:
    """verl's ``_parse_rollout_rs_thresholds``: one threshold shared or one per option; k1
    options take ``lower_upper`` (ratio bounds; one number gives 1/upper..upper)."""
    if spec is None:
        raise ValueError("rollout_rs_threshold must be provided for rejection sampling")
    raw = [p.strip() for p in str(spec).split(",") if p.strip()]
    if len(raw) not in (1, len(options)):
        raise ValueError(f"rollout_rs_threshold: one threshold, or {len(options)} (one per option)")
    raw = raw * len(options) if len(raw) == 1 else raw
    out: dict[str, tuple[float | None, float]] = {}
    for option, text in zip(options, raw, strict=True):
        if option.endswith("k1"):
            lo, sep, hi = text.partition("_")
            upper = float(hi if sep else lo)
            lower = float(lo) if sep else 1.0 / upper
            if lower <= 0 or upper <= 0:
                raise ValueError(f"rollout_rs_threshold of {option} must be positive ({text})")
            out[option] = (lower, upper)
        else:
            if "_" in text:
                raise ValueError(f"rollout_rs_threshold of {option} is one upper bound ({text})")
            upper = float(text)
            if upper <= 0:
                raise ValueError(f"rollout_rs_threshold of {option} must be positive ({text})")
            out[option] = (None, upper)
    return out


class VerlRolloutCorr:
    name = "verl-rollout-corr"
    framework = "verl 0.8.0.dev (commit b178a3cd56f5, 2026-01-29)"
    source = "verl/trainer/ppo/rollout_corr_helper.py"
    describes = (
        "verl algorithm.rollout_correction: token/sequence IS weights truncated at "
        "rollout_is_threshold, rejection masks rollout_rs (token_k1..seq_max_k3, AND-combined)"
    )
    clipped_key = f"{P}rollout_is_ratio_fraction_high"
    defaults: ClassVar[Config] = {  # verl's defaults (rollout_correction.yaml)
        "rollout_is": None,
        "rollout_is_threshold": 2.0,
        "rollout_rs": None,
        "rollout_rs_threshold": None,
    }

    def check(self, config: Config) -> None:
        if config["rollout_is"] not in (None, "token", "sequence"):
            raise ValueError(f"rollout_is `{config['rollout_is']}`: null, token or sequence")
        threshold = config["rollout_is_threshold"]
        if config["rollout_is"] is not None and not (
            isinstance(threshold, float) and threshold > 0
        ):
            raise ValueError(f"rollout_is_threshold `{threshold}` must be a positive number")
        options = rs_options(config)
        if options:
            rs_thresholds(options, config["rollout_rs_threshold"])
        if config["rollout_is"] is None and not options:
            raise ValueError("neither rollout_is nor rollout_rs is set: verl corrects nothing")

    def fields(self, config: Config) -> list[str]:
        options = rs_options(config)
        rs = [f"{o}_{k}" for o in options for k in ("masked", "seq_masked")]
        return [*COMMON_FIELDS, *IS_FIELDS, *rs]

    def compute(
        self,
        lr: np.ndarray,
        lt: np.ndarray,
        seq: np.ndarray,
        code: np.ndarray,
        n_cells: int,
        config: Config,
    ) -> np.ndarray:
        """States ``(n_cells, fields)``; every sequence's tokens are contiguous and in one cell."""
        lay = Layout(self.fields(config))
        out = lay.empty(n_cells)
        if len(lr) == 0:
            return out
        t = _Tokens(lt - lr, seq, code)
        col = lay.index
        out[:, col["tokens"]] = per_cell_sum(np.ones(len(t.r)), code, n_cells)
        out[:, col["seqs"]] = per_cell_sum(np.ones(len(t.starts)), t.seq_code, n_cells)
        weight = np.ones(len(t.r))
        if config["rollout_is"] is not None:
            w = _is_metrics(out, col, t, config, n_cells)
            weight = np.minimum(w, config["rollout_is_threshold"])
        keep = _rejection(out, col, t, config, n_cells)
        applied = weight * keep
        masked = 1.0 - keep
        out[:, col["masked"]] = per_cell_sum(masked, code, n_cells)
        seq_masked = (np.maximum.reduceat(masked, t.starts) > 0).astype(np.float64)
        out[:, col["seq_masked"]] = per_cell_sum(seq_masked, t.seq_code, n_cells)
        out[:, col["app_sum"]] = per_cell_sum(applied, code, n_cells)
        out[:, col["app_sq"]] = per_cell_sum(applied * applied, code, n_cells)
        out[:, col["app_min"]] = per_cell_extreme(applied, code, n_cells, np.minimum)
        out[:, col["app_max"]] = per_cell_extreme(applied, code, n_cells, np.maximum)
        return out

    def finalize(self, state: np.ndarray, config: Config) -> dict[str, Any]:
        v = dict(zip(self.fields(config), state.tolist(), strict=True))
        n, m = v["tokens"], v["seqs"]
        out: dict[str, Any] = {
            M.TOKENS: int(n),
            M.SEQUENCES: int(m),
            M.TOKEN_FRACTION: v["masked"] / n if n else None,
            M.SEQUENCE_FRACTION: v["seq_masked"] / m if m else None,
            M.WEIGHT_MEAN: v["app_sum"] / n if n else None,
            M.WEIGHT_STD: _std(v["app_sum"], v["app_sq"], n),
            M.WEIGHT_MIN: v["app_min"] if n else None,
            M.WEIGHT_MAX: v["app_max"] if n else None,
            M.ESS: _ess(v["app_sum"], v["app_sq"], n),
        }
        if config["rollout_is"] is not None and n:
            out.update(_is_finalize(v, config))
        options = rs_options(config)
        if options and n:
            for o in options:
                out[f"{P}rollout_rs_{o}_masked_fraction"] = v[f"{o}_masked"] / n
                out[f"{P}rollout_rs_{o}_seq_masked_fraction"] = v[f"{o}_seq_masked"] / m
            out[f"{P}rollout_rs_masked_fraction"] = v["masked"] / n
            out[f"{P}rollout_rs_seq_masked_fraction"] = v["seq_masked"] / m
        return out


class _Tokens:
    """A chunk's log ratios with its sequences' starts, lengths, sums and cells."""

    def __init__(self, r: np.ndarray, seq: np.ndarray, code: np.ndarray) -> None:
        self.r, self.code = r, code
        self.starts = sequence_starts(seq)
        self.lengths = np.diff(self.starts, append=len(r)).astype(np.float64)
        self.seq_code = code[self.starts]
        self.safe = np.clip(r, -SAFETY_BOUND, SAFETY_BOUND)

    def seq_sum(self, values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values, self.starts)

    def broadcast(self, per_seq: np.ndarray) -> np.ndarray:
        return np.repeat(per_seq, self.lengths.astype(np.int64))


def _is_metrics(
    out: np.ndarray, col: dict[str, int], t: _Tokens, config: Config, n: int
) -> np.ndarray:
    """``compute_is_metrics``'s sums; returns the untruncated per-token weights."""
    c = float(config["rollout_is_threshold"])
    lower = 1.0 / c
    code, seq_code = t.code, t.seq_code
    if config["rollout_is"] == "token":
        w = np.exp(t.safe)
        high, low = (w > c).astype(np.float64), (w < lower).astype(np.float64)
        out[:, col["high"]] = per_cell_sum(high, code, n)
        out[:, col["low"]] = per_cell_sum(low, code, n)
        out[:, col["w_max"]] = per_cell_extreme(w, code, n, np.maximum)
        out[:, col["w_min"]] = per_cell_extreme(w, code, n, np.minimum)
    else:
        s = t.seq_sum(t.r)  # unclamped log_ratio_for_metrics
        w = t.broadcast(np.exp(np.clip(s, -SAFETY_BOUND, SAFETY_BOUND)))
        out[:, col["high"]] = per_cell_sum((s > math.log(c)).astype(np.float64), seq_code, n)
        out[:, col["low"]] = per_cell_sum((s < math.log(lower)).astype(np.float64), seq_code, n)
        out[:, col["s_max"]] = per_cell_extreme(s, seq_code, n, np.maximum)
        out[:, col["s_min"]] = per_cell_extreme(s, seq_code, n, np.minimum)
    out[:, col["w_sum"]] = per_cell_sum(w, code, n)
    wc = np.clip(w, lower, c)
    out[:, col["wc_sum"]] = per_cell_sum(wc, code, n)
    out[:, col["wc2_sum"]] = per_cell_sum(wc * wc, code, n)
    seq_mean = t.seq_sum(w) / (t.lengths + EPS)
    out[:, col["seq_d_sum"]] = per_cell_sum(seq_mean - 1.0, seq_code, n)
    out[:, col["seq_d2_sum"]] = per_cell_sum((seq_mean - 1.0) ** 2, seq_code, n)
    out[:, col["seq_max"]] = per_cell_extreme(seq_mean, seq_code, n, np.maximum)
    out[:, col["seq_min"]] = per_cell_extreme(seq_mean, seq_code, n, np.minimum)
    out[:, col["seq_high"]] = per_cell_sum((seq_mean > c).astype(np.float64), seq_code, n)
    out[:, col["seq_low"]] = per_cell_sum((seq_mean < lower).astype(np.float64), seq_code, n)
    return w


def _rejection(
    out: np.ndarray, col: dict[str, int], t: _Tokens, config: Config, n: int
) -> np.ndarray:
    """``compute_rollout_rejection_mask``: the per-token keep mask (1 kept, 0 masked) of every
    option AND-combined, and each option's token and sequence masked counts."""
    keep = np.ones(len(t.r))
    options = rs_options(config)
    if not options:
        return keep
    bounds = rs_thresholds(options, config["rollout_rs_threshold"])
    k1, k2 = -t.safe, 0.5 * t.safe**2
    k3 = np.exp(t.safe) - 1.0 - t.safe
    per_k = {"k1": k1, "k2": k2, "k3": k3}
    for option in options:
        lower, upper = bounds[option]
        values = per_k[option[-2:]]
        if option.startswith("token"):
            stat = values
        elif option.startswith("seq_sum"):
            stat = t.broadcast(t.seq_sum(values))
        elif option.startswith("seq_mean"):
            stat = t.broadcast(t.seq_sum(values) / (t.lengths + EPS))
        else:  # seq_max
            stat = t.broadcast(np.maximum.reduceat(values, t.starts))
        if lower is not None:  # k1: log-ratio bounds
            ok = (stat >= math.log(lower)) & (stat <= math.log(upper))
        else:
            ok = stat <= upper
        option_masked = (~ok).astype(np.float64)
        keep *= ok
        out[:, col[f"{option}_masked"]] = per_cell_sum(option_masked, t.code, n)
        seq_hit = (np.maximum.reduceat(option_masked, t.starts) > 0).astype(np.float64)
        out[:, col[f"{option}_seq_masked"]] = per_cell_sum(seq_hit, t.seq_code, n)
    return keep


def _is_finalize(v: dict[str, float], config: Config) -> dict[str, Any]:
    n, m = v["tokens"], v["seqs"]
    out: dict[str, Any] = {f"{P}rollout_is_mean": v["w_sum"] / (n + EPS)}
    if config["rollout_is"] == "token":
        out[f"{P}rollout_is_max"], out[f"{P}rollout_is_min"] = v["w_max"], v["w_min"]
        out[f"{P}rollout_is_ratio_fraction_high"] = v["high"] / (n + EPS)
        out[f"{P}rollout_is_ratio_fraction_low"] = v["low"] / (n + EPS)
    else:
        out[f"{P}rollout_is_max"] = math.exp(min(v["s_max"], SAFETY_BOUND))
        out[f"{P}rollout_is_min"] = math.exp(v["s_min"])
        out[f"{P}rollout_is_ratio_fraction_high"] = v["high"] / m
        out[f"{P}rollout_is_ratio_fraction_low"] = v["low"] / m
    mean_wc = v["wc_sum"] / (n + EPS)  # verl's one-pass variance, as it computes it
    var = v["wc2_sum"] / (n + EPS) - mean_wc * mean_wc
    out[f"{P}rollout_is_std"] = math.sqrt(max(var, 0.0)) if n > 1 else 0.0
    out[f"{P}rollout_is_eff_sample_size"] = (mean_wc + EPS) ** 2 * (n + EPS) / v["wc2_sum"]
    seq_mean_d = v["seq_d_sum"] / m
    out[f"{P}rollout_is_seq_mean"] = 1.0 + seq_mean_d
    out[f"{P}rollout_is_seq_std"] = (
        math.sqrt(max(v["seq_d2_sum"] - m * seq_mean_d * seq_mean_d, 0.0) / (m - 1))
        if m > 1
        else 0.0
    )
    out[f"{P}rollout_is_seq_max"], out[f"{P}rollout_is_seq_min"] = v["seq_max"], v["seq_min"]
    out[f"{P}rollout_is_seq_max_deviation"] = max(v["seq_max"] - 1.0, 1.0 - v["seq_min"])
    out[f"{P}rollout_is_seq_fraction_high"] = v["seq_high"] / m
    out[f"{P}rollout_is_seq_fraction_low"] = v["seq_low"] / m
    return out


def _std(total: float, squares: float, n: float) -> float | None:
    if not n:
        return None
    mean = total / n
    return math.sqrt(max(squares / n - mean * mean, 0.0))


def _ess(total: float, squares: float, n: float) -> float | None:
    """(Σw)² / (n Σw²) of the applied weights (whatif's ESS); None when every weight is 0."""
    if not n or squares <= 0:
        return None
    return total * total / (n * squares)
