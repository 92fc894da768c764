"""Events on per-step training curves (issue #10): robust spikes, spikes of two curves that
coincide, reward drops, and a vllm_kl rise that precedes a reward drop.

Every definition is by step (never by array position) and rests on one rolling robust z-score:

    For the i-th *usable* point of a series (finite, and > 0 when ``log``; its value is then
    log10(value)), the trailing window is the up to ``window`` usable points before it (the
    missing and skipped steps do not count). With fewer than ``min_window`` of them the point is
    not assessed. Otherwise ``z = (v - m) / scale`` with ``m`` the window's median and ``scale`` =
    1.4826 x its MAD; when the MAD is 0, sqrt(pi/2) x the mean absolute deviation from ``m``;
    when that is 0 too, z = +inf / -inf / 0 as v is above / below / equal to ``m``.

A spike is ``z > z_threshold`` (upward only); a reward drop is ``z < -drop_z`` held for
``DROP_PERSIST`` consecutive usable points.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mismatchctl.curves.correlate import check_series
from mismatchctl.stats.robust import robust_z

SPIKE_Z = 3.5  # robust z-score above the trailing window that makes a spike (Iglewicz-Hoaglin 3.5)
SPIKE_WINDOW = 10  # trailing window: this many previous usable points of the same series
SPIKE_MIN_WINDOW = 5  # fewer previous usable points than this: the point is not assessed
COINCIDENCE_TOLERANCE = 1  # two spikes coincide when their steps differ by at most this
DROP_Z = 3.5  # robust z-score below the trailing window (linear scale) that makes a reward drop
DROP_PERSIST = 2  # a drop must last this many consecutive usable points (a one-point dip is noise)
RISE_HORIZON = 10  # a vllm_kl rise is looked for in this many steps before a reward drop
RISE_FACTOR = 2.0  # ...and is a value at least this many times the vllm_kl baseline


def usable(steps: np.ndarray, values: np.ndarray, log: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(steps, values)`` of the usable points (module docstring): finite, and > 0 when ``log``
    (vllm_kl is scored on the log scale: its usable points are the positive ones)."""
    s, v = check_series(steps, values)
    ok = np.isfinite(v) & (v > 0 if log else True)
    return s[ok], v[ok]


def rolling_z(
    steps: np.ndarray,
    values: np.ndarray,
    log: bool = False,
    window: int = SPIKE_WINDOW,
    min_window: int = SPIKE_MIN_WINDOW,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(steps, v, median, z)`` of the usable points (module docstring): ``v`` is the value
    (log10 of it with ``log``), ``median`` the trailing window's median and ``z`` the robust
    z-score, both NaN for points not assessed."""
    s, v = usable(steps, values, log)
    if log:
        v = np.log10(v)
    med = np.full(len(v), np.nan)
    z = np.full(len(v), np.nan)
    for i in range(min_window, len(v)):
        _, m, scale = robust_z(v[max(0, i - window) : i])
        med[i] = m
        dev = v[i] - m
        if scale > 0:
            z[i] = dev / scale
        else:
            z[i] = 0.0 if dev == 0 else np.copysign(np.inf, dev)
    return s, v, med, z


def spikes(
    steps: np.ndarray,
    values: np.ndarray,
    z: float = SPIKE_Z,
    log: bool = True,
    window: int = SPIKE_WINDOW,
    min_window: int = SPIKE_MIN_WINDOW,
) -> list[int]:
    """Steps whose rolling robust z-score (module docstring) exceeds ``z``: upward spikes only.

    ``log=True`` (for vllm_kl and other log-scale quantities) scores log10 of the positive values
    and skips the non-positive ones, as it skips NaN and +-inf."""
    s, _, _, score = rolling_z(steps, values, log, window, min_window)
    return [int(x) for x in s[score > z]]


@dataclass(frozen=True)
class Coincidence:
    """A spike of a at ``step_a`` with a spike of b at ``step_b`` (|step_b - step_a| <=
    tolerance)."""

    step_a: int
    step_b: int

    @property
    def offset(self) -> int:
        """``step_b - step_a``: positive when b spiked after a."""
        return self.step_b - self.step_a


def coincident_spikes(
    steps: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    tolerance: int = COINCIDENCE_TOLERANCE,
    z: float = SPIKE_Z,
    log_a: bool = True,
    log_b: bool = False,
    window: int = SPIKE_WINDOW,
    min_window: int = SPIKE_MIN_WINDOW,
) -> list[Coincidence]:
    """One :class:`Coincidence` per spike of a that has a spike of b within ``tolerance`` steps:
    the nearest such b spike (on a tie, the earlier one). Spikes are detected on each series
    separately (:func:`spikes`, non-finite values skipped, so ``a`` and ``b`` may be an outer
    join with NaN); ``log_a`` / ``log_b`` choose the log scale per series (pass ``log_b=True`` for
    a multiplicative quantity such as the gradient norm)."""
    spikes_b = np.asarray(spikes(steps, b, z, log_b, window, min_window), dtype=np.int64)
    out = []
    for sa in spikes(steps, a, z, log_a, window, min_window):
        near = spikes_b[np.abs(spikes_b - sa) <= tolerance]
        if len(near):
            sb = min(near.tolist(), key=lambda x: (abs(x - sa), x))
            out.append(Coincidence(step_a=sa, step_b=int(sb)))
    return out


@dataclass(frozen=True)
class Drop:
    """A reward drop at ``step``: ``before`` is the trailing window's median, ``after`` the reward
    at the step, ``z`` its robust z-score (negative; -inf for a drop from a constant window)."""

    step: int
    before: float
    after: float
    z: float


def reward_drops(
    steps: np.ndarray,
    reward: np.ndarray,
    z: float = DROP_Z,
    window: int = SPIKE_WINDOW,
    min_window: int = SPIKE_MIN_WINDOW,
    persist: int = DROP_PERSIST,
) -> list[Drop]:
    """Onsets of reward drops: usable points with rolling robust z-score (linear scale) below
    ``-z`` for at least ``persist`` consecutive usable points (a single low point of a noisy
    reward is not a drop; so the last ``persist - 1`` points cannot start one). Consecutive
    dropping points are one drop, reported at its first step: a collapse to a lower level keeps
    scoring low until the window fills with it, and is reported once."""
    s, v, med, score = rolling_z(steps, reward, False, window, min_window)
    low = score < -z
    return [
        Drop(step=int(s[i]), before=float(med[i]), after=float(v[i]), z=float(score[i]))
        for i in np.flatnonzero(low)
        if (i == 0 or not low[i - 1]) and i + persist <= len(low) and low[i : i + persist].all()
    ]


@dataclass(frozen=True)
class Precedence:
    """A vllm_kl rise before a reward drop. ``kl_rise_step``: the first step of the look-back window
    where vllm_kl reached ``RISE_FACTOR`` x ``kl_baseline``; ``kl_peak``: the window's largest
    vllm_kl; ``kl_factor`` = ``kl_peak / kl_baseline``."""

    drop_step: int
    reward_before: float
    reward_after: float
    kl_rise_step: int
    kl_baseline: float
    kl_peak: float
    kl_factor: float

    @property
    def lead(self) -> int:
        """Steps from the kl rise to the reward drop (>= 1)."""
        return self.drop_step - self.kl_rise_step


def rise_before_drop(
    steps: np.ndarray,
    kl: np.ndarray,
    reward: np.ndarray,
    horizon: int = RISE_HORIZON,
    factor: float = RISE_FACTOR,
    drop_z: float = DROP_Z,
    window: int = SPIKE_WINDOW,
    min_window: int = SPIKE_MIN_WINDOW,
) -> list[Precedence]:
    """Reward drops (:func:`reward_drops`) preceded by a vllm_kl rise, by step.

    For a drop at step ``d``: the look-back window is the steps ``d - horizon <= s < d`` (strictly
    before the drop: a same-step rise is a coincidence, not a lead). The baseline is the median of
    the last ``window`` usable kl values (finite and > 0) at steps ``< d - horizon``; with fewer
    than ``min_window`` of them, or no usable kl in the look-back window, the drop is not assessed.
    vllm_kl rose when the look-back window's largest usable value is ``>= factor x baseline``.
    Only the drops where it rose are returned; :func:`reward_drops` lists all of them."""
    s, k = usable(steps, kl, log=True)
    out = []
    for drop in reward_drops(steps, reward, drop_z, window, min_window):
        start = drop.step - horizon
        history = k[s < start][-window:]
        inside = (s >= start) & (s < drop.step)
        if len(history) < min_window or not inside.any():
            continue
        baseline = float(np.median(history))
        peak = float(k[inside].max())
        if peak < factor * baseline:
            continue
        rise = int(s[inside][np.argmax(k[inside] >= factor * baseline)])
        out.append(
            Precedence(
                drop_step=drop.step,
                reward_before=drop.before,
                reward_after=drop.after,
                kl_rise_step=rise,
                kl_baseline=baseline,
                kl_peak=peak,
                kl_factor=peak / baseline,
            )
        )
    return out


def rise_assessable(
    steps: np.ndarray,
    kl: np.ndarray,
    drop_step: int,
    horizon: int = RISE_HORIZON,
    min_window: int = SPIKE_MIN_WINDOW,
) -> bool:
    """Whether :func:`rise_before_drop` can judge a drop at ``drop_step``: at least
    ``min_window`` usable vllm_kl values before the look-back window, and one inside it."""
    s, _ = usable(steps, kl, log=True)
    start = drop_step - horizon
    return int((s < start).sum()) >= min_window and bool(((s >= start) & (s < drop_step)).any())
