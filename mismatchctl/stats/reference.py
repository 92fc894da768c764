"""Exact float64 reference of every metric, written straight from METRICS.md.

Used by the tests to check the partial aggregates; it favours clarity over speed and keeps whole
arrays in memory. It follows the same output conventions as ``Partial.finalize`` (None when not
computable, NaN -> None, inf kept).
"""

from __future__ import annotations

import math

import numpy as np

from mismatchctl.stats import registry as M
from mismatchctl.stats.histogram import QUANTILES
from mismatchctl.stats.partial import METRIC_NAMES, flat
from mismatchctl.stats.tails import DEFAULT_TAILS, Tails

Segment = tuple[np.ndarray, np.ndarray]


def reference_metrics(
    seqs: list[Segment],
    tails: Tails = DEFAULT_TAILS,
    turns: list[np.ndarray] | None = None,
) -> dict[str, float | int | None]:
    """Every metric of METRICS.md from ``(lr, lt)`` model-token arrays of each sequence/segment;
    ``turns``: each segment's turn index per token (None: each segment is one turn)."""
    if turns is None:
        turns = [np.zeros(len(lr), np.int64) for lr, _ in seqs]
    kept = [(lr, lt, t) for (lr, lt), t in zip(seqs, turns, strict=True) if len(lr) > 0]
    segs = [(np.asarray(lr, np.float64), np.asarray(lt, np.float64)) for lr, lt, _ in kept]
    out: dict[str, float | int | None] = dict.fromkeys(METRIC_NAMES)
    out[M.TOKENS] = sum(len(lr) for lr, _ in segs)
    out[M.SEQUENCES] = len(segs)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow gives inf, as in Partial
        # exp(r) is inf exactly when r exceeds log(float64 max)
        out[M.OVERFLOW_TOKENS] = sum(int(np.sum(np.isinf(np.exp(lt - lr)))) for lr, lt in segs)
        if segs:
            out.update(_token_metrics(segs))
            out.update(_tail_metrics(segs, tails))
            out.update(_sequence_metrics(segs))
            out[M.RATIO_SEGMENT_MEAN] = np.mean(
                [_turn_ratio_mean(lt - lr, np.asarray(t)) for lr, lt, t in kept]
            )
    extreme = out.pop(M.EXTREME_FRAC_TAU2)
    out[tails.extreme_metric] = extreme
    return {k: _clean(v) for k, v in out.items()}


def _tail_metrics(segs: list[Segment], tails: Tails) -> dict[str, float]:
    """The tail-robust metrics (``stats.tails``), from their definitions."""
    r = np.concatenate([lt - lr for lr, lt in segs])
    c = np.clip(r, -tails.clamp, tails.clamp)
    rho = np.exp(r)
    return {
        M.VLLM_KL_CLAMPED: np.mean(np.exp(c) - 1 - c),
        M.EXTREME_FRAC_TAU2: np.mean(np.abs(r) > np.log(tails.tau)),
        M.IS_OOB_RATIO: np.mean((rho < tails.is_lower) | (rho > tails.is_upper)),
        M.PROB_DIFF_MEAN: np.mean(np.concatenate([np.exp(lt) - np.exp(lr) for lr, lt in segs])),
    }


def _turn_ratio_mean(r: np.ndarray, turn: np.ndarray) -> float:
    """Mean over the sequence's tokens of ``exp(mean r of the token's turn)``: a turn is a
    maximal run of equal turn index (ROLL's ``compute_segment_masked_mean``)."""
    values = np.empty(len(r))
    start = 0
    for i in range(1, len(r) + 1):
        if i == len(r) or turn[i] != turn[i - 1]:
            values[start:i] = np.exp(np.mean(r[start:i]))
            start = i
    return float(np.mean(values))


def _token_metrics(segs: list[Segment]) -> dict[str, float | None]:
    lr = np.concatenate([lr for lr, _ in segs])
    lt = np.concatenate([lt for _, lt in segs])
    r = lt - lr
    rho = np.exp(r)
    pr, pt = np.exp(lr), np.exp(lt)
    values = {
        M.VLLM_KL: np.mean(rho - 1 - r),
        M.KL_K1: np.mean(-r),
        M.KL_K2: np.mean(r**2 / 2),
        M.LOG_RATIO_MEAN: np.mean(r),
        M.LOG_RATIO_STD: np.std(r),
        M.ABS_LOG_RATIO_MEAN: np.mean(np.abs(r)),
        M.ABS_LOG_RATIO_MAX: np.max(np.abs(r)),
        M.CHI2_TOKEN: np.mean(np.exp(2 * np.clip(r, -20, 20))) - 1,
        M.RATIO_DEV_1E4: (np.mean(rho) - 1) * 10000,
        M.PROB_ABS_DIFF_MEAN: np.mean(np.abs(pt - pr)),
        M.PROB_ABS_DIFF_MAX: np.max(np.abs(pt - pr)),
        M.PROB_PEARSON: _pearson(pr, pt),
        M.ROLLOUT_PROB_MEAN: np.mean(pr),
    }
    return values


def _sequence_metrics(segs: list[Segment]) -> dict[str, float | None]:
    rollout = np.array([-np.mean(lr) for lr, _ in segs])  # rollout_log_ppl_i
    trainer = np.array([-np.mean(lt) for _, lt in segs])  # trainer_log_ppl_i
    s = np.array([np.sum(lt - lr) for lr, lt in segs])  # S_i
    values = {
        M.VLLM_KL_SEQ_MEAN: np.mean([np.mean(np.exp(t - r) - 1 - (t - r)) for r, t in segs]),
        M.ROLLOUT_LOG_PPL: np.mean(rollout),
        M.TRAINER_LOG_PPL: np.mean(trainer),
        M.ROLLOUT_PPL: np.mean(np.exp(rollout)),
        M.TRAINER_PPL: np.mean(np.exp(trainer)),
        M.LOG_PPL_DIFF: np.mean(trainer - rollout),
        M.LOG_PPL_ABS_DIFF: np.mean(np.abs(trainer - rollout)),
        M.PPL_RATIO: np.mean(np.exp(trainer - rollout)),
        M.LOG_PPL_PEARSON: _pearson(rollout, trainer),
        M.CHI2_SEQ: np.mean(np.exp(2 * np.clip(s, -20, 20))) - 1,
    }
    return values


def _pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    """Textbook Pearson; None for fewer than two points or a constant (to 6 significant digits,
    see ``partial.flat``) or underflowing variable."""
    if len(x) < 2 or flat(float(x.min()), float(x.max())) or flat(float(y.min()), float(y.max())):
        return None
    dx, dy = x - x.mean(), y - y.mean()
    sxx, syy = np.sum(dx * dx), np.sum(dy * dy)
    if sxx <= 0 or syy <= 0:
        return None
    value = np.sum(dx * dy) / (math.sqrt(sxx) * math.sqrt(syy))
    return float(np.clip(value, -1.0, 1.0))


def reference_quantiles(r: np.ndarray) -> dict[str, float | None]:
    """Exact quantiles of ``r`` (numpy ``method='linear'``) under the names of METRICS.md."""
    r = np.asarray(r, dtype=np.float64)
    if len(r) == 0:
        return dict.fromkeys(QUANTILES)
    return {name: float(np.quantile(r, p, method="linear")) for name, p in QUANTILES.items()}


def _clean(value: float | int | None) -> float | int | None:
    if value is None or isinstance(value, int):
        return value
    x = float(value)
    return None if math.isnan(x) else x
