"""Length scaling: does a sequence's summed log ratio ``S = sum r`` grow like ``sqrt(T)``
(independent per-token noise: numerics) or like ``T`` (a per-token bias: semantics, policy)?

The test: sequences are binned by their model tokens ``T`` (half octaves: edges ``2^(k/2)``
rounded); in each bin with at
least ``MIN_BIN_SEQUENCES`` sequences, ``x = log mean T`` and ``y = log RMS(S)``; the exponent
``k`` is the slope of ``y`` on ``x`` (least squares weighted by the bins' sequences). Independent
noise gives ``k = 1/2`` (the variance of a sum adds), a bias ``b`` per token ``k = 1`` (``S ~
bT``); a bias under noise moves ``k`` from 1/2 towards 1 as the lengths pass
``sigma^2 / b^2``, the *crossover*, also given. The RMS rather than the variance or the mean
of ``S``: it holds both the bias (``b^2 T^2``) and the noise (``sigma^2 T``) without
choosing, and a log-log slope needs no model of the noise's size. The interval is a
bootstrap over sequences (``RESAMPLES`` resamples of the whole sequences, a fixed seed), the
unit whose tokens share a bias; the verdict is *bias* when the whole interval lies above
``MIDPOINT`` (3/4, halfway), *noise* when it lies below, else *mixed*; and *growing* when it
lies above ``GROWING`` (5/4): faster than T, the per-token mismatch itself grows with the length
(a long-context code path: numerics, which ``localized`` places), not a constant bias.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mismatchctl.stats.positions import assign_positions

LENGTH_EDGES = (0, *sorted({round(2 ** (k / 2)) for k in range(2, 41)}))  # 0, 2, 3, 4, 6, 8...
MIN_BIN_SEQUENCES = 8  # sequences in a length bin for its RMS to count
MIN_SPAN = 2.0  # the mean lengths of the bins used must span this factor: a slope needs a lever
RESAMPLES = 200
SEED = 20_240_045
LEVEL = 0.95
MIDPOINT = 0.75  # halfway between noise (1/2) and bias (1)
GROWING = 1.25  # as far above a bias (1) as the midpoint is below it
NOISE, BIAS, MIXED, RISING = "noise", "bias", "mixed", "growing"


@dataclass(frozen=True)
class LengthBin:
    """One length bin: its lower edge, sequences, mean ``T``, mean and RMS of ``S``."""

    lower: int
    sequences: int
    mean_tokens: float
    mean_sum: float
    rms_sum: float


@dataclass(frozen=True)
class LengthScaling:
    """The test's result (``exponent`` None when the lengths do not span enough bins)."""

    sequences: int
    exponent: float | None
    interval: tuple[float, float] | None
    bias_per_token: float  # b = sum S / sum T (the token mean of r)
    noise_per_token: float  # sigma^2 = sum (S - b T)^2 / sum T
    crossover_tokens: float | None  # sigma^2 / b^2 (None: no bias)
    verdict: str | None
    bins: tuple[LengthBin, ...]

    def to_dict(self) -> dict:
        return {
            "sequences": self.sequences,
            "exponent": self.exponent,
            "interval": list(self.interval) if self.interval else None,
            "bias_per_token": self.bias_per_token,
            "noise_per_token": self.noise_per_token,
            "crossover_tokens": self.crossover_tokens,
            "verdict": self.verdict,
            "bins": [b.__dict__ for b in self.bins],
        }


def length_scaling(tokens: np.ndarray, r_sum: np.ndarray) -> LengthScaling:
    """The test on one run's sequences (``tokens``: ``T`` per sequence, ``r_sum``: ``S``);
    sequences without model tokens are left out."""
    keep = (tokens > 0) & np.isfinite(r_sum)
    t, s = tokens[keep].astype(np.float64), r_sum[keep].astype(np.float64)
    code = assign_positions(t.astype(np.int64), LENGTH_EDGES)
    exponent = _exponent(t, s, code, np.ones(len(t)))
    interval = _interval(t, s, code) if exponent is not None else None
    total = float(t.sum())
    b = float(s.sum()) / total if total else 0.0
    noise = float(((s - b * t) ** 2).sum()) / total if total else 0.0
    return LengthScaling(
        len(t),
        exponent,
        interval,
        b,
        noise,
        noise / (b * b) if b != 0 else None,
        _verdict(interval),
        _bins(t, s, code),
    )


def _sums(t: np.ndarray, s: np.ndarray, code: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, ...]:
    n = len(LENGTH_EDGES)
    return (
        np.bincount(code, weights=w, minlength=n),
        np.bincount(code, weights=w * t, minlength=n),
        np.bincount(code, weights=w * s * s, minlength=n),
    )


def _exponent(t: np.ndarray, s: np.ndarray, code: np.ndarray, w: np.ndarray) -> float | None:
    """The weighted slope of log RMS(S) on log mean T over the bins with enough sequences."""
    n, st, ss = _sums(t, s, code, w)
    use = (n >= MIN_BIN_SEQUENCES) & (ss > 0)
    if use.sum() < 2:
        return None
    x = np.log(st[use] / n[use])
    y = 0.5 * np.log(ss[use] / n[use])
    if x.max() - x.min() < np.log(MIN_SPAN):
        return None
    wt = n[use]
    xm, ym = np.average(x, weights=wt), np.average(y, weights=wt)
    return float(np.sum(wt * (x - xm) * (y - ym)) / np.sum(wt * (x - xm) ** 2))


def _interval(t: np.ndarray, s: np.ndarray, code: np.ndarray) -> tuple[float, float] | None:
    """Percentile interval of the exponent over resamples of whole sequences."""
    rng = np.random.default_rng(SEED)
    found = []
    for _ in range(RESAMPLES):
        w = np.bincount(rng.integers(0, len(t), len(t)), minlength=len(t)).astype(np.float64)
        k = _exponent(t, s, code, w)
        if k is not None:
            found.append(k)
    if len(found) < RESAMPLES // 2:
        return None
    tail = (1 - LEVEL) / 2 * 100
    lo, hi = np.percentile(found, [tail, 100 - tail])
    return float(lo), float(hi)


def _verdict(interval: tuple[float, float] | None) -> str | None:
    if interval is None:
        return None
    if interval[0] > GROWING:
        return RISING
    if interval[0] > MIDPOINT:
        return BIAS
    if interval[1] < MIDPOINT:
        return NOISE
    return MIXED


def _bins(t: np.ndarray, s: np.ndarray, code: np.ndarray) -> tuple[LengthBin, ...]:
    out = []
    for k in np.unique(code):
        m = code == k
        out.append(
            LengthBin(
                int(LENGTH_EDGES[k]),
                int(m.sum()),
                float(t[m].mean()),
                float(s[m].mean()),
                float(np.sqrt((s[m] ** 2).mean())),
            )
        )
    return tuple(out)
