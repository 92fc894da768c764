"""``Partial``: the mergeable state of one group, and how it turns into the metrics of METRICS.md.

A partial holds only sums, counts, extremes, centred co-moments and (optionally) a fixed-edge
histogram of ``r``, never values, so it can be computed on any slice of whole sequences and merged
in any order. ``finalize`` applies the definitions of METRICS.md.

Output conventions of ``finalize``: ``tokens`` and ``sequences`` are ints; every other metric is a
float, or None when it cannot be computed (no tokens; a Pearson correlation with fewer than two
points or a constant variable; a NaN from e.g. ``inf - inf``). An overflow (``exp`` of a log ratio
above ~709) is returned as ``float('inf')``: keeping it out of JSON is the renderer's job;
``overflow_tokens`` counts the tokens whose ``r`` is beyond ``EXP_MAX``, so it can say why.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from mismatchctl.stats import histogram
from mismatchctl.stats import registry as M
from mismatchctl.stats.state import Col, empty_state, merge_states
from mismatchctl.stats.tails import DEFAULT_TAILS, Tails

TOKEN_METRICS = (
    M.VLLM_KL,
    M.KL_K1,
    M.KL_K2,
    M.LOG_RATIO_MEAN,
    M.LOG_RATIO_STD,
    M.ABS_LOG_RATIO_MEAN,
    M.ABS_LOG_RATIO_MAX,
    M.CHI2_TOKEN,
    M.RATIO_DEV_1E4,
    M.PROB_ABS_DIFF_MEAN,
    M.PROB_ABS_DIFF_MAX,
    M.PROB_PEARSON,
    M.ROLLOUT_PROB_MEAN,
    M.VLLM_KL_CLAMPED,
    M.EXTREME_FRAC_TAU2,
    M.IS_OOB_RATIO,
    M.PROB_DIFF_MEAN,
)
SEQUENCE_METRICS = (
    M.VLLM_KL_SEQ_MEAN,
    M.ROLLOUT_LOG_PPL,
    M.TRAINER_LOG_PPL,
    M.ROLLOUT_PPL,
    M.TRAINER_PPL,
    M.LOG_PPL_DIFF,
    M.LOG_PPL_ABS_DIFF,
    M.PPL_RATIO,
    M.LOG_PPL_PEARSON,
    M.CHI2_SEQ,
    M.RATIO_SEGMENT_MEAN,
)
QUANTILE_METRICS = tuple(histogram.QUANTILES)
COUNT_METRICS = (M.TOKENS, M.SEQUENCES, M.OVERFLOW_TOKENS)  # ints; 0 in an empty group
METRIC_NAMES = (*COUNT_METRICS, *TOKEN_METRICS, *SEQUENCE_METRICS)

Value = float | int | None


class Partial:
    """Mergeable state of ONE group: token metrics, segment metrics, optional r-histogram.

    Immutable by convention: ``merge`` returns a new object. The raw sums that reports need for
    shares are exposed as attributes (``tokens``, ``sequences``, ``k3_sum``, ``low_prob_tokens``).
    A partial without a histogram that holds tokens makes any merge it enters histogram-less
    (quantiles are then None rather than silently computed from part of the tokens).
    """

    __slots__ = ("_hist", "_state")

    def __init__(self, state: np.ndarray, hist: np.ndarray | None = None) -> None:
        self._state = state
        self._hist = hist

    @classmethod
    def empty(cls, with_hist: bool = False) -> Partial:
        """The identity of ``merge``."""
        hist = np.zeros(histogram.N_BINS, dtype=np.int64) if with_hist else None
        return cls(empty_state(), hist)

    @property
    def state(self) -> np.ndarray:
        """The raw state vector (columns in ``mismatchctl.stats.state.Col``); do not mutate."""
        return self._state

    @property
    def hist(self) -> np.ndarray | None:
        """Counts of the r-histogram (``mismatchctl.stats.histogram`` layout), or None."""
        return self._hist

    @property
    def tokens(self) -> int:
        return int(self._state[Col.TOKENS])

    @property
    def sequences(self) -> int:
        """Segments with at least one token (sequences, when the group does not split them)."""
        return int(self._state[Col.SEGMENTS])

    @property
    def k3_sum(self) -> float:
        """Sum over tokens of ``rho - 1 - r``: the numerator of ``vllm_kl`` and of ``kl_share``."""
        return float(self._state[Col.K3_SUM])

    @property
    def overflow_tokens(self) -> int:
        """Tokens with ``r > EXP_MAX`` (~709.78): ``exp(r)`` is beyond float64 (inf)."""
        return int(self._state[Col.R_OVERFLOW])

    @property
    def low_prob_tokens(self) -> int:
        """Tokens with ``exp(lr) < 1e-3``."""
        return int(self._state[Col.LOW_PROB])

    def merge(self, other: Partial) -> Partial:
        """Associative, commutative; ``Partial.empty()`` is the identity."""
        return Partial(merge_states(self._state, other._state), _merge_hists(self, other))

    def finalize(self, tails: Tails = DEFAULT_TAILS) -> dict[str, Value]:
        """Metric name -> value, names exactly as in METRICS.md (quantiles only with a histogram).
        ``tails``: the thresholds the state was computed with; they name the extreme fraction
        (``extreme_frac_tau{tau}``)."""
        out: dict[str, Value] = {
            M.TOKENS: self.tokens,
            M.SEQUENCES: self.sequences,
            M.OVERFLOW_TOKENS: self.overflow_tokens,
        }
        for key, value in _token_metrics(self._state).items():
            out[tails.extreme_metric if key == M.EXTREME_FRAC_TAU2 else key] = value
        out.update(_sequence_metrics(self._state))
        if self._hist is not None:
            s = self._state
            out.update(histogram.quantiles(self._hist, s[Col.R_MIN], s[Col.R_MAX]))
        return {k: _clean(v) for k, v in out.items()}

    def __repr__(self) -> str:
        return f"Partial(tokens={self.tokens}, sequences={self.sequences}, hist={self.has_hist})"

    @property
    def has_hist(self) -> bool:
        return self._hist is not None


def merge_all(parts: Iterable[Partial], with_hist: bool = False) -> Partial:
    """Merge any number of partials (``Partial.empty(with_hist)`` when there are none)."""
    total = Partial.empty(with_hist)
    for part in parts:
        total = total.merge(part)
    return total


def shares(part: Partial, total: Partial) -> dict[str, float | None]:
    """``token_share`` and ``kl_share`` of a group within a total (None when the total is 0)."""
    return {
        M.TOKEN_SHARE: part.tokens / total.tokens if total.tokens else None,
        M.KL_SHARE: part.k3_sum / total.k3_sum if total.k3_sum else None,
    }


def _merge_hists(a: Partial, b: Partial) -> np.ndarray | None:
    if a._hist is not None and b._hist is not None:
        return a._hist + b._hist
    if a._hist is None and a.tokens == 0:
        return b._hist
    if b._hist is None and b.tokens == 0:
        return a._hist
    return None


def _token_metrics(s: np.ndarray) -> dict[str, Value]:
    n = s[Col.TOKENS]
    if n == 0:
        return dict.fromkeys(TOKEN_METRICS)
    r_sum = s[Col.R_SUM]
    return {
        M.VLLM_KL: s[Col.K3_SUM] / n,
        M.KL_K1: -r_sum / n,
        M.KL_K2: (s[Col.R_M2] + r_sum * (r_sum / n)) / (2 * n),
        M.LOG_RATIO_MEAN: r_sum / n,
        M.LOG_RATIO_STD: math.sqrt(max(s[Col.R_M2], 0.0) / n),
        M.ABS_LOG_RATIO_MEAN: s[Col.ABS_R_SUM] / n,
        M.ABS_LOG_RATIO_MAX: max(s[Col.R_MAX], -s[Col.R_MIN]),
        M.CHI2_TOKEN: s[Col.CHI2_SUM] / n,
        M.RATIO_DEV_1E4: s[Col.RHO_M1_SUM] / n * 10_000,
        M.PROB_ABS_DIFF_MEAN: s[Col.DP_SUM] / n,
        M.PROB_ABS_DIFF_MAX: s[Col.DP_MAX],
        M.PROB_PEARSON: pearson(
            s[Col.PR_M2], s[Col.PT_M2], s[Col.PRPT_C],
            constant=flat(s[Col.PR_MIN], s[Col.PR_MAX]) or flat(s[Col.PT_MIN], s[Col.PT_MAX]),
        ),
        M.ROLLOUT_PROB_MEAN: s[Col.PR_SUM] / n,
        M.VLLM_KL_CLAMPED: s[Col.K3_CLAMP_SUM] / n,
        M.EXTREME_FRAC_TAU2: s[Col.EXTREME] / n,
        M.IS_OOB_RATIO: s[Col.IS_OOB] / n,
        M.PROB_DIFF_MEAN: (s[Col.PT_SUM] - s[Col.PR_SUM]) / n,
    }  # fmt: skip


def _sequence_metrics(s: np.ndarray) -> dict[str, Value]:
    m = s[Col.SEGMENTS]
    if m == 0:
        return dict.fromkeys(SEQUENCE_METRICS)
    return {
        M.VLLM_KL_SEQ_MEAN: s[Col.SEG_K3_MEAN_SUM] / m,
        M.ROLLOUT_LOG_PPL: s[Col.RLP_SUM] / m,
        M.TRAINER_LOG_PPL: s[Col.TLP_SUM] / m,
        M.ROLLOUT_PPL: s[Col.RPPL_SUM] / m,
        M.TRAINER_PPL: s[Col.TPPL_SUM] / m,
        M.LOG_PPL_DIFF: s[Col.D_SUM] / m,
        M.LOG_PPL_ABS_DIFF: s[Col.ABS_D_SUM] / m,
        M.PPL_RATIO: s[Col.PPL_RATIO_SUM] / m,
        M.LOG_PPL_PEARSON: pearson(
            s[Col.RLP_M2], s[Col.TLP_M2], s[Col.RLPTLP_C],
            constant=flat(s[Col.RLP_MIN], s[Col.RLP_MAX]) or flat(s[Col.TLP_MIN], s[Col.TLP_MAX]),
        ),
        M.CHI2_SEQ: s[Col.CHI2_SEQ_SUM] / m,
        M.RATIO_SEGMENT_MEAN: s[Col.RATIO_SEG_SUM] / m,
    }  # fmt: skip


FLAT_SPREAD = 1e-6  # relative spread below which a variable counts as constant (see flat)


def flat(lo: float, hi: float) -> bool:
    """A variable whose values all agree to 6 significant digits: its centred moments, merged
    from means near its magnitude, keep only ~1e-10 of relative precision per merge and less
    below that, so a correlation with it would depend on the order of merges: undefined."""
    return hi - lo <= FLAT_SPREAD * max(abs(lo), abs(hi))


def pearson(m2x: float, m2y: float, cxy: float, *, constant: bool) -> float | None:
    """Pearson correlation from centred moments, clamped to [-1, 1]; None when undefined.

    ``constant`` comes from the exact min/max of each variable: a constant variable has zero
    variance in exact arithmetic, but its rounded moments may not, and would give a random r.
    """
    if constant or m2x <= 0 or m2y <= 0:
        return None
    return min(1.0, max(-1.0, cxy / (math.sqrt(m2x) * math.sqrt(m2y))))


def _clean(value: Value | np.floating | np.integer) -> Value:
    """Plain Python numbers; NaN becomes None (inf is kept, see the module docstring)."""
    if value is None or isinstance(value, int):
        return value
    x = float(value)
    return None if math.isnan(x) else x
