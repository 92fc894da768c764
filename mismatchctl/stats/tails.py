"""The thresholds of the tail-robust metrics (docs/metrics.md, "Tail-robust metrics").

- ``clamp``: ``vllm_kl_clamped`` is K3 of ``clamp(r, -clamp, clamp)`` (slime/miles'
  ``train_rollout_kl`` clamps the log ratio to [-10, 10]);
- ``tau``: ``extreme_frac_tau{tau}`` is the share of tokens whose ratio is beyond ``tau`` either
  way, ``|r| > ln(tau)`` (AReaL's ``rollout_train_extreme_frac_tau2``: tau = 2);
- ``is_lower``, ``is_upper``: ``is_oob_ratio`` is the share of tokens whose ratio ``exp(r)`` lies
  outside ``[is_lower, is_upper]`` (verl's ``rollout_corr/rollout_is_oob_ratio``), tested in log
  space as ``r < ln(is_lower)`` or ``r > ln(is_upper)`` so that no ratio overflows.

The thresholds travel with the engine's binning (``engines.plan.Binning``) to the kernel, and
are written in the JSON (``tails``) beside the numbers they produced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mismatchctl.options import DEFAULT_CLAMP, DEFAULT_TAU
from mismatchctl.stats import registry as M

DEFAULT_IS_BOUNDS = (0.5, 2.0)  # verl's rollout_is_threshold 2.0, and its reciprocal


@dataclass(frozen=True)
class Tails:
    """The thresholds of ``vllm_kl_clamped``, ``extreme_frac_tau{tau}`` and ``is_oob_ratio``."""

    clamp: float = DEFAULT_CLAMP
    tau: float = DEFAULT_TAU
    is_lower: float = DEFAULT_IS_BOUNDS[0]
    is_upper: float = DEFAULT_IS_BOUNDS[1]

    def __post_init__(self) -> None:
        if not (math.isfinite(self.clamp) and self.clamp > 0):
            raise ValueError(f"the clamp must be a positive number (found {self.clamp})")
        if not (math.isfinite(self.tau) and self.tau > 1):
            raise ValueError(f"tau must be a ratio above 1 (found {self.tau})")
        lo, hi = self.is_lower, self.is_upper
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi):
            raise ValueError(f"the bounds must satisfy 0 < lower < upper (found {lo}, {hi})")

    @property
    def log_tau(self) -> float:
        return math.log(self.tau)

    @property
    def log_bounds(self) -> tuple[float, float]:
        return math.log(self.is_lower), math.log(self.is_upper)

    @property
    def extreme_metric(self) -> M.Metric:
        """The name of the extreme fraction at this tau (``extreme_frac_tau2`` by default)."""
        return M.extreme_frac(self.tau)

    def to_dict(self) -> dict[str, float | list[float]]:
        """The thresholds as the JSON writes them (``tails``)."""
        return {
            "clamp": self.clamp,
            "tau": self.tau,
            "is_bounds": [self.is_lower, self.is_upper],
        }


DEFAULT_TAILS = Tails()


def parse_bounds(text: str) -> tuple[float, float]:
    """``LOWER_UPPER`` (verl's threshold grammar, e.g. ``0.5_2.0``) or one ``UPPER`` (the lower
    bound is then its reciprocal)."""
    parts = text.strip().split("_")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"`{text}` is not LOWER_UPPER or UPPER (numbers)") from None
    if len(values) == 1 and values[0] > 0:
        return 1.0 / values[0], values[0]
    if len(values) != 2:
        raise ValueError(f"`{text}` is not LOWER_UPPER or UPPER")
    return values[0], values[1]
