"""Signed offsets between the two sides, with standard errors that respect sequences.

Tokens of one sequence are not independent (one context, one sampling run), so a token-level
standard error would make any tiny bias "significant" on millions of tokens. Treating each
sequence as a cluster, the token mean ``m = sum_i S_i / sum_i T_i`` (``S_i`` a per-sequence sum,
``T_i`` its token count) has the ratio-estimator variance
``k / (k - 1) * sum_i (S_i - m T_i)^2 / (sum_i T_i)^2`` over ``k`` sequences, which only needs the
mergeable sums ``sum S^2``, ``sum S T`` and ``sum T^2``. It is kept for ``r`` (the mean log ratio)
and for ``rho - 1`` (the mean ratio, whose deficit from 1 is the kept mass of a one-sided top-p /
top-k renormalisation), with ``rho`` formed from ``clamp(r, -20, 20)``.
"""

from __future__ import annotations

import math
from enum import IntEnum

import numpy as np

from mismatchctl.stats import per_token
from mismatchctl.stats import registry as M
from mismatchctl.stats.reduce import run_starts
from mismatchctl.stats.whatif import RATIO_LOG_CLAMP


class OC(IntEnum):
    TOKENS = 0
    SEQS = 1
    NEG = 2  # tokens with r < 0 (rollout logprob higher)
    POS = 3  # tokens with r > 0
    T2 = 4  # sum of T_i^2
    R_SUM = 5  # sum of r
    R_S2 = 6  # sum over sequences of S_i^2, S_i = sum of r
    R_ST = 7  # sum of S_i T_i
    Q_SUM = 8  # sum of rho - 1
    Q_S2 = 9
    Q_ST = 10


N_FIELDS = len(OC)


def offset_state(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    r: np.ndarray | None = None,
    starts: np.ndarray | None = None,
    ratio: np.ndarray | None = None,
) -> np.ndarray:
    """Sums of one chunk of whole sequences (each a contiguous run of ``seq``); merge by adding.
    ``r`` (``lt - lr``), ``starts`` (each sequence's first row) and ``ratio`` (each token's
    ``rho - 1`` of the clamped ``r``: ``signed_parts.clamped_ratio``): when the caller has them."""
    out = np.zeros(N_FIELDS)
    if len(lr) == 0:
        return out
    if r is None:
        r = np.asarray(lt, np.float64) - np.asarray(lr, np.float64)
    q = per_token.expm1(np.clip(r, -RATIO_LOG_CLAMP, RATIO_LOG_CLAMP)) if ratio is None else ratio
    starts = run_starts(np.asarray(seq)) if starts is None else starts
    t = np.diff(starts, append=len(r)).astype(np.float64)
    s_r, s_q = np.add.reduceat(r, starts), np.add.reduceat(q, starts)
    out[OC.TOKENS], out[OC.SEQS] = len(r), len(starts)
    out[OC.NEG], out[OC.POS] = np.count_nonzero(r < 0), np.count_nonzero(r > 0)
    out[OC.T2] = t @ t
    out[OC.R_SUM], out[OC.R_S2], out[OC.R_ST] = s_r.sum(), s_r @ s_r, s_r @ t
    out[OC.Q_SUM], out[OC.Q_S2], out[OC.Q_ST] = s_q.sum(), s_q @ s_q, s_q @ t
    return out


def _mean_se(total: float, s2: float, st: float, s: np.ndarray) -> tuple[float, float | None]:
    n, k = s[OC.TOKENS], s[OC.SEQS]
    m = total / n
    if k < 2:
        return m, None
    resid = max(s2 - 2 * m * st + m * m * s[OC.T2], 0.0)
    return m, math.sqrt(k / (k - 1) * resid) / n


def offset_summary(s: np.ndarray) -> dict[str, float | int | None]:
    """``log_ratio_mean`` and ``ratio_mean`` with their standard errors and z-scores (z of the
    ratio against 1), ``k3_mean``: the mean K3 per token, ``(rho - 1) - mean r`` (each token's
    ``K3 = expm1(r) - r``), and ``negative_share``: the share of tokens with r < 0 among those
    with r != 0 (0.5 for symmetric noise)."""
    keys = (
        M.LOG_RATIO_MEAN, "log_ratio_se", "log_ratio_z", "ratio_mean", "ratio_se", "ratio_z",
        "k3_mean",
    )  # fmt: skip
    out: dict[str, float | int | None] = dict.fromkeys(keys)
    out[M.TOKENS], out[M.SEQUENCES] = int(s[OC.TOKENS]), int(s[OC.SEQS])
    signed = s[OC.NEG] + s[OC.POS]
    out["negative_share"] = float(s[OC.NEG] / signed) if signed else None
    if s[OC.TOKENS] == 0:
        return out
    m, se = _mean_se(s[OC.R_SUM], s[OC.R_S2], s[OC.R_ST], s)
    q, qse = _mean_se(s[OC.Q_SUM], s[OC.Q_S2], s[OC.Q_ST], s)
    out.update(
        log_ratio_mean=m,
        log_ratio_se=se,
        log_ratio_z=_z(m, se),
        ratio_mean=1.0 + q,
        ratio_se=qse,
        ratio_z=_z(q, qse),
        k3_mean=q - m,
    )
    return out


def _z(x: float, se: float | None) -> float | None:
    if se is None:
        return None
    if se == 0:
        return 0.0 if x == 0 else math.copysign(math.inf, x)
    return x / se
