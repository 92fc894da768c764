"""verl's rollout correction (``algorithm.rollout_correction``), as
``verl/trainer/ppo/rollout_corr_helper.py`` computes it in verl 0.9.1 (the PyPI release):
``compute_rollout_correction_and_rejection_mask``, that is ``compute_rollout_correction_weights``
+ ``compute_is_metrics`` (IS weights of ``rollout_is`` = token / sequence: truncated at
``rollout_is_threshold`` (TIS), or zeroed outside ``LOWER_UPPER`` (IcePop), optionally divided by
their batch mean, ``rollout_is_batch_normalize``), ``compute_rollout_rejection_mask`` (the
``rollout_rs`` options, comma-separated, all of which must pass, with ``rollout_rs_threshold``) and
``compute_offpolicy_metrics`` (KL, K3, perplexities, chi²). ``log_ratio = old_log_prob -
rollout_log_prob`` (r).

Reported per group, under verl's names (``rollout_corr/...``): the IS metrics (mean, max, min,
std, ESS of the applied weights; ratio fractions high/low of the raw ones; per-sequence
statistics; ``rollout_is_oob_ratio`` with IcePop, ``rollout_is_batch_norm_factor`` with the batch
normalization), the rejection masks' token and sequence masked fractions per option and combined,
and the off-policy metrics. verl computes them per training batch: a ``(run, step)`` group gives
the number of its chart. Of ``compute_rs_metrics`` (the statistics of each rejection criterion)
only the masked fractions are reproduced. verl's masked means divide by the count plus 1e-8 and
so do these; verl compares a sequence's log ratio sum with ``log`` of the threshold taken in
float32 (``torch.log(torch.tensor(threshold))``), and so does the preset; the fractions verl takes
with ``.float().mean()`` are float32 in verl, float64 here.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from mismatchctl.stats import registry as M
from mismatchctl.stats.presets.base import (
    COUNTS,
    WEIGHTS,
    CellPreset,
    Cells,
    Chunk,
    Config,
    per_cell_extreme,
    per_cell_sum,
)

SAFETY_BOUND = 20.0  # verl: ratios are exp(clamp(log ratio, -20, 20))
EPS = 1e-8  # verl_F.masked_mean divides by (mask count + 1e-8): kept, so the numbers are verl's
RS_OPTIONS = (
    "token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3",
)  # fmt: skip
IS_FIELDS = [
    "w_sum", "w2_sum", "high", "low", "oob", "w_max", "w_min", "s_max", "s_min",
    "seq_d_sum", "seq_d2_sum", "seq_max", "seq_min", "seq_high", "seq_low",
]  # fmt: skip
OFF_FIELDS = [
    "kl_sum", "k3_sum", "rho2_sum", "t_ppl", "t_logppl", "r_ppl", "r_logppl",
    "lpd_sum", "lpd_abs", "lpd_max", "lpd_min", "ppl_ratio", "rho2_seq",
]  # fmt: skip
P = "rollout_corr/"


def is_threshold(spec: Any) -> tuple[float, float | None]:
    """verl's ``_parse_rollout_is_threshold``: ``(upper, lower)``; a number (TIS) has no lower
    bound, ``LOWER_UPPER`` (IcePop) has one."""
    if isinstance(spec, bool) or not isinstance(spec, float | int | str):
        raise ValueError(f"rollout_is_threshold `{spec}`: a number (TIS) or LOWER_UPPER (IcePop)")
    text = str(spec).strip()
    lo, sep, hi = text.partition("_")
    try:
        upper = float(hi if sep else lo)
        lower = float(lo) if sep else None
    except ValueError:
        raise ValueError(
            f"rollout_is_threshold `{spec}`: a number (TIS) or LOWER_UPPER (IcePop)"
        ) from None
    if upper <= 0 or (lower is not None and not 0 < lower <= upper):
        raise ValueError(f"rollout_is_threshold `{spec}`: bounds positive, lower <= upper")
    return upper, lower


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
            if lower > upper:
                raise ValueError(f"rollout_rs_threshold of {option}: lower <= upper ({text})")
            out[option] = (lower, upper)
        else:
            if "_" in text:
                raise ValueError(f"rollout_rs_threshold of {option} is one upper bound ({text})")
            upper = float(text)
            if upper <= 0:
                raise ValueError(f"rollout_rs_threshold of {option} must be positive ({text})")
            out[option] = (None, upper)
    return out


class VerlRolloutCorr(CellPreset):
    """Its common numbers are not ``common_metrics``': verl's batch normalization divides the
    weights by a factor of the whole group, and its ESS is (Σw)² / (n Σw²) as written."""

    name = "verl-rollout-corr"
    framework = "verl 0.9.1 (PyPI release)"
    source = "verl/trainer/ppo/rollout_corr_helper.py"
    describes = (
        "verl algorithm.rollout_correction: token/sequence IS weights truncated at "
        "rollout_is_threshold (TIS) or zeroed outside LOWER_UPPER (IcePop), optionally "
        "batch-normalized; rejection masks rollout_rs (token_k1..seq_max_k3, AND-combined); "
        "off-policy metrics"
    )
    clipped_key = f"{P}rollout_is_ratio_fraction_high"
    # verl's defaults (trainer/config/algorithm/rollout_correction.yaml)
    defaults: ClassVar[Config] = {
        "rollout_is": None,
        "rollout_is_threshold": 2.0,
        "rollout_is_batch_normalize": False,
        "rollout_rs": None,
        "rollout_rs_threshold": None,
    }

    def check(self, config: Config) -> None:
        if config["rollout_is"] not in (None, "token", "sequence"):
            raise ValueError(f"rollout_is `{config['rollout_is']}`: null, token or sequence")
        if config["rollout_is"] is not None:
            is_threshold(config["rollout_is_threshold"])
        if not isinstance(config["rollout_is_batch_normalize"], bool):
            raise ValueError(
                f"rollout_is_batch_normalize `{config['rollout_is_batch_normalize']}`: true or false"
            )
        options = rs_options(config)
        if options:
            rs_thresholds(options, config["rollout_rs_threshold"])
        if config["rollout_is"] is None and not options:
            raise ValueError("neither rollout_is nor rollout_rs is set: verl corrects nothing")

    def fields(self, config: Config) -> list[str]:
        options = rs_options(config)
        rs = [f"{o}_{k}" for o in options for k in ("masked", "seq_masked")]
        return [*COUNTS, *WEIGHTS, *OFF_FIELDS, *IS_FIELDS, *rs]

    def fill(self, cells: Cells, config: Config) -> tuple[np.ndarray, np.ndarray]:
        out, col, chunk = cells.out, cells.col, cells.chunk
        lr, lt, n_cells = chunk.lr, chunk.lt, chunk.n_cells
        t = _Tokens(chunk)
        with np.errstate(over="ignore", invalid="ignore"):
            _offpolicy(out, col, t, lr, lt, n_cells)
        weight = np.ones(len(t.r))
        if config["rollout_is"] is not None:
            weight = _is_metrics(out, col, t, config, n_cells)
        keep = _rejection(out, col, t, config, n_cells)
        return 1.0 - keep, weight * keep  # applied before verl's batch normalization

    def finalize(self, state: np.ndarray, config: Config) -> dict[str, Any]:
        v = dict(zip(self.fields(config), state.tolist(), strict=True))
        n, m = v["tokens"], v["seqs"]
        factor = _batch_norm_factor(v, config)
        scale = 1.0 if factor is None else factor
        out: dict[str, Any] = {
            M.TOKENS: int(n),
            M.SEQUENCES: int(m),
            M.TOKEN_FRACTION: v["masked"] / n if n else None,
            M.SEQUENCE_FRACTION: v["seq_masked"] / m if m else None,
            M.WEIGHT_MEAN: v["app_sum"] / scale / n if n else None,
            M.WEIGHT_STD: _std(v["app_sum"] / scale, v["app_sq"] / scale**2, n),
            M.WEIGHT_MIN: v["app_min"] / scale if n else None,
            M.WEIGHT_MAX: v["app_max"] / scale if n else None,
            M.ESS: _ess(v["app_sum"], v["app_sq"], n),
        }
        if not n:
            return out
        if config["rollout_is"] is not None:
            out.update(_is_finalize(v, config))
            if config["rollout_is_batch_normalize"]:
                out[f"{P}rollout_is_batch_norm_factor"] = scale
        options = rs_options(config)
        if options:
            for o in options:
                out[f"{P}rollout_rs_{o}_masked_fraction"] = v[f"{o}_masked"] / (n + EPS)
                out[f"{P}rollout_rs_{o}_seq_masked_fraction"] = v[f"{o}_seq_masked"] / m
            out[f"{P}rollout_rs_masked_fraction"] = v["masked"] / (n + EPS)
            out[f"{P}rollout_rs_seq_masked_fraction"] = v["seq_masked"] / m
        out.update(_offpolicy_finalize(v))
        return out


class _Tokens:
    """A chunk's log ratios with its sequences' starts, lengths, sums and cells."""

    def __init__(self, chunk: Chunk) -> None:
        self.r, self.code = chunk.lt - chunk.lr, chunk.code
        self.starts, self.seq_code = chunk.starts, chunk.seq_code
        self.lengths = chunk.lengths.astype(np.float64)
        self.safe = np.clip(self.r, -SAFETY_BOUND, SAFETY_BOUND)

    def seq_sum(self, values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values, self.starts)

    def broadcast(self, per_seq: np.ndarray) -> np.ndarray:
        return np.repeat(per_seq, self.lengths.astype(np.int64))


def _log32(x: float) -> float:
    """``torch.log(torch.tensor(x))``: the log of a threshold in float32, as verl compares a
    sequence's log ratio sum with it."""
    return float(np.log(np.float32(x)))


def _is_metrics(
    out: np.ndarray, col: dict[str, int], t: _Tokens, config: Config, n: int
) -> np.ndarray:
    """``compute_rollout_correction_weights`` and ``compute_is_metrics``'s sums; returns the
    per-token IS weights as applied (truncated, or zeroed outside the IcePop band)."""
    upper, icepop = is_threshold(config["rollout_is_threshold"])
    lower = 1.0 / upper if icepop is None else icepop
    code, seq_code = t.code, t.seq_code
    if config["rollout_is"] == "token":
        raw = np.exp(t.safe)
    else:
        s = t.seq_sum(t.r)  # unclamped log_ratio_for_metrics
        raw = t.broadcast(np.exp(np.clip(s, -SAFETY_BOUND, SAFETY_BOUND)))
    if icepop is None:
        w = np.minimum(raw, upper)
    else:
        outside = (raw < icepop) | (raw > upper)
        w = np.where(outside, 0.0, raw)
        out[:, col["oob"]] = per_cell_sum(outside.astype(np.float64), code, n)
    if config["rollout_is"] == "token":
        out[:, col["high"]] = per_cell_sum((raw > upper).astype(np.float64), code, n)
        out[:, col["low"]] = per_cell_sum((raw < lower).astype(np.float64), code, n)
        out[:, col["w_max"]] = per_cell_extreme(w, code, n, np.maximum)
        out[:, col["w_min"]] = per_cell_extreme(w, code, n, np.minimum)
    else:
        high, low = s > _log32(upper), s < _log32(lower)
        out[:, col["high"]] = per_cell_sum(high.astype(np.float64), seq_code, n)
        out[:, col["low"]] = per_cell_sum(low.astype(np.float64), seq_code, n)
        out[:, col["s_max"]] = per_cell_extreme(s, seq_code, n, np.maximum)
        out[:, col["s_min"]] = per_cell_extreme(s, seq_code, n, np.minimum)
    out[:, col["w_sum"]] = per_cell_sum(w, code, n)
    out[:, col["w2_sum"]] = per_cell_sum(w * w, code, n)  # clamp(w, 0, upper) is w
    seq_mean = t.seq_sum(w) / (t.lengths + EPS)
    out[:, col["seq_d_sum"]] = per_cell_sum(seq_mean - 1.0, seq_code, n)
    out[:, col["seq_d2_sum"]] = per_cell_sum((seq_mean - 1.0) ** 2, seq_code, n)
    out[:, col["seq_max"]] = per_cell_extreme(seq_mean, seq_code, n, np.maximum)
    out[:, col["seq_min"]] = per_cell_extreme(seq_mean, seq_code, n, np.minimum)
    raw_mean = t.seq_sum(raw) / (t.lengths + EPS)  # the high / low fractions use the raw means
    out[:, col["seq_high"]] = per_cell_sum((raw_mean > upper).astype(np.float64), seq_code, n)
    out[:, col["seq_low"]] = per_cell_sum((raw_mean < lower).astype(np.float64), seq_code, n)
    return w


def _offpolicy(
    out: np.ndarray,
    col: dict[str, int],
    t: _Tokens,
    lr: np.ndarray,
    lt: np.ndarray,
    n: int,
) -> None:
    """``compute_offpolicy_metrics``' sums: token means of the KL (rollout - old), K3 (r not
    clamped) and rho² (clamped); per-sequence perplexities and the chi² of the sequence ratio."""
    code, seq_code = t.code, t.seq_code
    rho = np.exp(t.safe)
    out[:, col["kl_sum"]] = per_cell_sum(lr - lt, code, n)
    out[:, col["k3_sum"]] = per_cell_sum(np.exp(t.r) - t.r - 1.0, code, n)
    out[:, col["rho2_sum"]] = per_cell_sum(rho * rho, code, n)
    mean_t = t.seq_sum(lt) / (t.lengths + EPS)
    mean_r = t.seq_sum(lr) / (t.lengths + EPS)
    diff = mean_r - mean_t  # log_ppl_diff
    for name, values in (
        ("t_ppl", np.exp(-mean_t)),
        ("t_logppl", -mean_t),
        ("r_ppl", np.exp(-mean_r)),
        ("r_logppl", -mean_r),
        ("lpd_sum", diff),
        ("lpd_abs", np.abs(diff)),
        ("ppl_ratio", np.exp(diff)),
        ("rho2_seq", np.exp(2.0 * np.clip(t.seq_sum(t.r), -SAFETY_BOUND, SAFETY_BOUND))),
    ):
        out[:, col[name]] = per_cell_sum(values, seq_code, n)
    out[:, col["lpd_max"]] = per_cell_extreme(diff, seq_code, n, np.maximum)
    out[:, col["lpd_min"]] = per_cell_extreme(diff, seq_code, n, np.minimum)


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
    _, icepop = is_threshold(config["rollout_is_threshold"])
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
    mean_w = v["w_sum"] / (n + EPS)  # verl's one-pass variance, as it computes it
    var = v["w2_sum"] / (n + EPS) - mean_w * mean_w
    out[f"{P}rollout_is_std"] = math.sqrt(max(var, 0.0)) if n > 1 else 0.0
    out[f"{P}rollout_is_eff_sample_size"] = (
        (mean_w + EPS) ** 2 * (n + EPS) / v["w2_sum"] if v["w2_sum"] > 0 else None
    )  # verl divides by zero when IcePop zeroes every weight
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
    if icepop is not None:
        out[f"{P}rollout_is_oob_ratio"] = v["oob"] / (n + EPS)
    return out


def _batch_norm_factor(v: dict[str, float], config: Config) -> float | None:
    """verl's ``rollout_is_batch_normalize``: the IS weights are divided by their batch mean
    (over tokens; over sequences for ``sequence``) when it exceeds 1e-8; None when not set."""
    if config["rollout_is"] is None or not config["rollout_is_batch_normalize"]:
        return None
    n, m = v["tokens"], v["seqs"]
    if not n:
        return None
    if config["rollout_is"] == "token":
        mean = v["w_sum"] / (n + EPS)
    else:
        mean = (m + v["seq_d_sum"]) / max(m, EPS)
    return mean if mean > EPS else 1.0


def _offpolicy_finalize(v: dict[str, float]) -> dict[str, Any]:
    n, m = v["tokens"], v["seqs"]
    return {
        f"{P}training_ppl": v["t_ppl"] / m,
        f"{P}training_log_ppl": v["t_logppl"] / m,
        f"{P}kl": v["kl_sum"] / (n + EPS),
        f"{P}k3_kl": v["k3_sum"] / (n + EPS),
        f"{P}rollout_ppl": v["r_ppl"] / m,
        f"{P}rollout_log_ppl": v["r_logppl"] / m,
        f"{P}log_ppl_diff": v["lpd_sum"] / m,
        f"{P}log_ppl_abs_diff": v["lpd_abs"] / m,
        f"{P}log_ppl_diff_max": v["lpd_max"],
        f"{P}log_ppl_diff_min": v["lpd_min"],
        f"{P}ppl_ratio": v["ppl_ratio"] / m,
        f"{P}chi2_token": v["rho2_sum"] / (n + EPS) - 1.0,
        f"{P}chi2_seq": v["rho2_seq"] / m - 1.0,
    }


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
