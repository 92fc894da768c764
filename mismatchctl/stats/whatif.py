"""Correction what-if (METRICS.md "Correction what-if") as mergeable per-cell states.

Every method gives each *unit* (a token, or a sequence's segment) a raw weight, an applied weight
and a flag saying whether the method clipped or rejected it:

| method | unit | raw weight | applied weight | flagged when |
| --- | --- | --- | --- | --- |
| ``token-tis`` | token | rho_t | min(rho_t, C) | rho_t > C (clipped) |
| ``token-mis`` | token | rho_t | rho_t, or 0 when rejected | rho_t > C (rejected) |
| ``seq-tis`` | sequence | exp(S_i) | min(exp(S_i), C) | exp(S_i) > C (clipped) |
| ``seq-mis`` | sequence | exp(S_i) | exp(S_i), or 0 when rejected | exp(S_i) > C (rejected) |
| ``geo-rs`` | sequence | G_i = exp(S_i / T_i) | 1 kept, 0 rejected | G_i outside [lower, upper] |
| ``k3-rs`` | sequence | exp(S_i) | 1 kept, 0 rejected | mean K3 of the sequence > t |
| ``veto`` | sequence | exp(S_i) | 1 kept, 0 rejected | some rho_t < tau |
| ``batch-filter`` | token | rho_t | 1 kept, 0 rejected | the batch's vllm_kl > t |

Rejection-only methods (geo-rs, k3-rs, veto, batch-filter) apply a mask, not a ratio: their
applied weight is 0 or 1 and their raw weight is the unit's importance ratio, for reference.
Ratios are ``exp(clamp(log ratio, -20, 20))`` of the log ratio they are formed from (``r_t``,
``S_i`` or ``S_i / T_i``), as in verl; rejection tests use the unclamped log ratio, except veto,
which compares the clamped ``rho_t`` with tau (the same for any tau > exp(-20)). K3 is unclamped,
as in ``vllm_kl``.

A cell's state holds counts, sums, centred second moments and extremes of both weights (merged
with Chan et al.'s rule), so cells computed on any parts merge exactly. The batch filter needs the
batch's ``vllm_kl`` before it can decide: cells keep the K3 sum, a batch is a (run, step) group,
and ``reject_all`` turns the cells of a batch found above the threshold into rejected cells once
all parts are merged. Sequence-level units are *segments* (a sequence's tokens in one cell): with
cells keyed by sequence-level keys (run, step, gpu) they are whole sequences; with turn kinds each
turn kind of a sequence is a unit carrying the sequence's weight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from mismatchctl.stats import per_token
from mismatchctl.stats import registry as M
from mismatchctl.stats.reduce import GroupReducer, run_starts

RATIO_LOG_CLAMP = 20.0  # METRICS.md: ratios are formed from clamp(r, -20, 20)

Threshold = float | tuple[float, float]


@dataclass(frozen=True)
class MethodInfo:
    unit: str  # "token" or "sequence"
    action: str  # "clipped" or "rejected"
    default: Threshold
    describes: str


# Defaults: C = 2 is the study's Seq-MIS threshold (BACKGROUND.md) and verl's default truncation;
# 0.999_1.001, 0.01, 1e-4 and 0.1 are the examples of METRICS.md (0.1 is the study's batch filter).
METHODS: dict[str, MethodInfo] = {
    "token-tis": MethodInfo("token", "clipped", 2.0, "token TIS: w = min(rho, C)"),
    "token-mis": MethodInfo("token", "rejected", 2.0, "token MIS: token rejected if rho > C"),
    "seq-tis": MethodInfo("sequence", "clipped", 2.0, "sequence TIS: w = min(exp(S), C)"),
    "seq-mis": MethodInfo("sequence", "rejected", 2.0, "sequence MIS: rejected if exp(S) > C"),
    "geo-rs": MethodInfo(
        "sequence", "rejected", (0.999, 1.001), "Geo-RS: rejected if exp(S/T) is outside [lo, hi]"
    ),
    "k3-rs": MethodInfo("sequence", "rejected", 0.01, "K3-RS: rejected if mean K3 > t"),
    "veto": MethodInfo("sequence", "rejected", 1e-4, "veto: rejected if some rho < tau"),
    "batch-filter": MethodInfo(
        "token", "rejected", 0.1, "batch filter: batch skipped if its vllm_kl > t"
    ),
}


@dataclass(frozen=True)
class Method:
    name: str
    threshold: Threshold

    @property
    def info(self) -> MethodInfo:
        return METHODS[self.name]

    @property
    def value(self) -> float:
        """The threshold of a one-number method (every method but geo-rs)."""
        if isinstance(self.threshold, tuple):
            raise TypeError(f"{self.name} has a LOWER_UPPER threshold")
        return float(self.threshold)

    @property
    def bounds(self) -> tuple[float, float]:
        """The [lower, upper] threshold of geo-rs."""
        if not isinstance(self.threshold, tuple):
            raise TypeError(f"{self.name} has a one-number threshold")
        return self.threshold

    def threshold_text(self) -> str:
        t = self.threshold
        return f"{t[0]:g}_{t[1]:g}" if isinstance(t, tuple) else f"{t:g}"


def parse_threshold(name: str, text: str) -> Threshold:
    """``"2"`` or, for geo-rs, ``"0.999_1.001"``; raises ValueError saying what is expected."""
    if name not in METHODS:
        raise ValueError(f"unknown method `{name}` (methods: {', '.join(METHODS)})")
    if name == "geo-rs":
        lo, sep, hi = text.partition("_")
        if not sep:
            raise ValueError(f"geo-rs threshold `{text}` is not LOWER_UPPER (e.g. 0.999_1.001)")
        bounds = (_positive(lo, name), _positive(hi, name))
        if bounds[0] > bounds[1]:
            raise ValueError(f"geo-rs threshold `{text}`: lower bound above upper bound")
        return bounds
    return _positive(text, name)


def _positive(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} threshold `{text}` is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} threshold `{text}` must be a positive number")
    return value


class W(IntEnum):
    """Columns of a cell's state vector."""

    TOKENS = 0
    TOKENS_HIT = 1  # tokens clipped or rejected (tokens of flagged sequences for sequence units)
    SEQS = 2  # segments with at least one token
    SEQS_HIT = 3  # segments with a flagged token, or flagged themselves
    UNITS = 4
    UNITS_HIT = 5
    K3_SUM = 6  # sum of rho - 1 - r over tokens: the batch filter's vllm_kl numerator
    RAW_SUM = 7
    RAW_M2 = 8
    RAW_MIN = 9
    RAW_MAX = 10
    APP_SUM = 11
    APP_M2 = 12
    APP_MIN = 13
    APP_MAX = 14


N_FIELDS = len(W)
_MOMENTS = (
    (W.RAW_SUM, W.RAW_M2, W.RAW_MIN, W.RAW_MAX),
    (W.APP_SUM, W.APP_M2, W.APP_MIN, W.APP_MAX),
)


def empty_state(shape: tuple[int, ...] = ()) -> np.ndarray:
    """The identity of ``merge``: zero counts, +inf minima, -inf maxima."""
    s = np.zeros((*shape, N_FIELDS))
    for _, _, lo, hi in _MOMENTS:
        s[..., lo], s[..., hi] = np.inf, -np.inf
    return s


def merge(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Merge two states (or arrays of states, elementwise); associative and commutative."""
    out = a + b
    na, nb = a[..., W.UNITS], b[..., W.UNITS]
    n = np.where(na + nb > 0, na + nb, 1.0)
    safe_a, safe_b = np.where(na > 0, na, 1.0), np.where(nb > 0, nb, 1.0)
    for s, m2, lo, hi in _MOMENTS:
        delta = b[..., s] / safe_b - a[..., s] / safe_a
        out[..., m2] = a[..., m2] + b[..., m2] + delta * delta * na * nb / n
        out[..., lo] = np.minimum(a[..., lo], b[..., lo])
        out[..., hi] = np.maximum(a[..., hi], b[..., hi])
    return out


def reject_all(state: np.ndarray) -> np.ndarray:
    """The cell with every unit rejected (applied weight 0): a batch skipped by the filter."""
    out = state.copy()
    out[..., W.TOKENS_HIT] = state[..., W.TOKENS]
    out[..., W.SEQS_HIT] = state[..., W.SEQS]
    out[..., W.UNITS_HIT] = state[..., W.UNITS]
    has = state[..., W.UNITS] > 0
    out[..., W.APP_SUM] = 0.0
    out[..., W.APP_M2] = 0.0
    out[..., W.APP_MIN] = np.where(has, 0.0, np.inf)
    out[..., W.APP_MAX] = np.where(has, 0.0, -np.inf)
    return out


@dataclass
class _Layout:
    """Per-token arrays of one chunk and its segment (sequence x cell) and sequence runs."""

    r: np.ndarray
    k3: np.ndarray
    code: np.ndarray
    seg_starts: np.ndarray
    seg_len: np.ndarray
    seg_code: np.ndarray
    seg_seq: np.ndarray  # index of each segment's sequence
    seq_starts: np.ndarray
    seq_len: np.ndarray


def _layout(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    code: np.ndarray,
    given: tuple[np.ndarray, np.ndarray] | None = None,
) -> _Layout:
    if given is not None:
        r, k3 = given
    else:
        r = lt - lr
        k3 = per_token.k3(r)  # K3 overflow is inf, as in vllm_kl
    n = len(r)
    seq_starts = run_starts(seq)
    boundary = np.zeros(n, dtype=bool)
    boundary[seq_starts] = True
    boundary[1:] |= code[1:] != code[:-1]
    seg_starts = np.flatnonzero(boundary)
    return _Layout(
        r,
        k3,
        code,
        seg_starts,
        np.diff(seg_starts, append=n).astype(np.float64),
        code[seg_starts],
        np.searchsorted(seq_starts, seg_starts, side="right") - 1,
        seq_starts,
        np.diff(seq_starts, append=n).astype(np.float64),
    )


def cell_states(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    code: np.ndarray,
    n_cells: int,
    methods: list[Method],
    log_ratio: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """States of shape ``(n_cells, len(methods), N_FIELDS)`` from one chunk of model tokens.
    ``log_ratio``: each token's ``r = lt - lr`` and ``expm1(r) - r`` when the caller has them
    (the engine's extras compute them once per slice).

    ``seq``: sequence id per token, each sequence one contiguous run holding all its tokens;
    ``code``: cell per token, in ``0..n_cells-1``, in runs within each sequence (sequence-level
    keys, or turn kinds, which come in turn order).
    """
    lr, lt = np.asarray(lr, np.float64), np.asarray(lt, np.float64)
    seq, code = np.asarray(seq, np.int64), np.asarray(code, np.int64)
    out = empty_state((n_cells, len(methods)))
    if len(lr) == 0:
        return out
    lay = _layout(lr, lt, seq, code, log_ratio)
    tokens = GroupReducer.from_index(code, n_cells)
    segments = GroupReducer.from_index(lay.seg_code, n_cells)
    counts = (tokens.counts(), segments.counts(), tokens.sum(lay.k3))
    seq_stats = _sequence_stats(lay)
    for j, method in enumerate(methods):
        if method.info.unit == "token":
            raw, applied, hit = _token_weights(method, lay)
            _fill_token(out[:, j], lay, tokens, segments, raw, applied, hit)
        else:
            raw, applied, hit = _sequence_weights(method, seq_stats)
            _fill_segment(out[:, j], lay, segments, raw, applied, hit)
        out[:, j, W.TOKENS], out[:, j, W.SEQS], out[:, j, W.K3_SUM] = counts
    return out


def _ratio(log_ratio: np.ndarray) -> np.ndarray:
    return np.exp(np.clip(log_ratio, -RATIO_LOG_CLAMP, RATIO_LOG_CLAMP))


def _token_weights(method: Method, lay: _Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rho = _ratio(lay.r)
    if method.name == "batch-filter":  # decided per batch after merging: see reject_all
        return rho, np.ones_like(rho), np.zeros(len(rho), dtype=bool)
    c = method.value
    hit = lay.r > math.log(c)
    if method.name == "token-tis":
        return rho, np.minimum(rho, c), hit
    return rho, np.where(hit, 0.0, rho), hit  # token-mis


def _sequence_stats(lay: _Layout) -> dict[str, np.ndarray]:
    """Per sequence: S_i, T_i, sum of K3 and the smallest clamped log ratio."""
    s = np.add.reduceat(lay.r, lay.seq_starts)
    with np.errstate(invalid="ignore"):  # inf - inf in an overflowing K3 sum stays non-finite
        k3 = np.add.reduceat(lay.k3, lay.seq_starts)
    r_min = np.minimum.reduceat(np.clip(lay.r, -RATIO_LOG_CLAMP, RATIO_LOG_CLAMP), lay.seq_starts)
    return {"S": s, "T": lay.seq_len, "k3": k3, "r_min": r_min}


def _sequence_weights(
    method: Method, st: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    s, t = st["S"], st["T"]
    seq_ratio = _ratio(s)
    ones = np.ones_like(s)
    if method.name == "geo-rs":
        lo, hi = method.bounds
        mean_log = s / t
        hit = (mean_log < math.log(lo)) | (mean_log > math.log(hi))
        return _ratio(mean_log), np.where(hit, 0.0, ones), hit
    if method.name == "k3-rs":
        hit = ~(st["k3"] / t <= method.value)  # a NaN mean (overflowing K3) is rejected
        return seq_ratio, np.where(hit, 0.0, ones), hit
    if method.name == "veto":
        hit = np.exp(st["r_min"]) < method.value
        return seq_ratio, np.where(hit, 0.0, ones), hit
    c = method.value
    hit = s > math.log(c)
    if method.name == "seq-tis":
        return seq_ratio, np.minimum(seq_ratio, c), hit
    return seq_ratio, np.where(hit, 0.0, seq_ratio), hit  # seq-mis


def _fill_token(
    out: np.ndarray,
    lay: _Layout,
    tokens: GroupReducer,
    segments: GroupReducer,
    raw: np.ndarray,
    applied: np.ndarray,
    hit: np.ndarray,
) -> None:
    hits = hit.astype(np.float64)
    out[:, W.UNITS] = tokens.counts()
    out[:, W.UNITS_HIT] = out[:, W.TOKENS_HIT] = tokens.sum(hits)
    seg_hit = np.maximum.reduceat(hits, lay.seg_starts)
    out[:, W.SEQS_HIT] = segments.sum(seg_hit)
    _moments(out, tokens, raw, applied)


def _fill_segment(
    out: np.ndarray,
    lay: _Layout,
    segments: GroupReducer,
    raw: np.ndarray,
    applied: np.ndarray,
    hit: np.ndarray,
) -> None:
    seg_hit = hit[lay.seg_seq].astype(np.float64)
    out[:, W.UNITS] = segments.counts()
    out[:, W.UNITS_HIT] = out[:, W.SEQS_HIT] = segments.sum(seg_hit)
    out[:, W.TOKENS_HIT] = segments.sum(seg_hit * lay.seg_len)
    _moments(out, segments, raw[lay.seg_seq], applied[lay.seg_seq])


def _moments(out: np.ndarray, red: GroupReducer, raw: np.ndarray, applied: np.ndarray) -> None:
    n = out[:, W.UNITS]
    for values, (s, m2, lo, hi) in zip((raw, applied), _MOMENTS, strict=True):
        out[:, s] = red.sum(values)
        out[:, m2] = red.centred(values, out[:, s], n)[1]
        out[:, lo] = red.extreme(np.minimum, values)
        out[:, hi] = red.extreme(np.maximum, values)


FIELDS_OUT = (
    M.UNITS,
    M.TOKENS,
    M.SEQUENCES,
    M.TOKEN_FRACTION,
    M.SEQUENCE_FRACTION,
    M.RAW_MEAN,
    M.RAW_STD,
    M.RAW_MIN,
    M.RAW_MAX,
    M.WEIGHT_MEAN,
    M.WEIGHT_STD,
    M.WEIGHT_MIN,
    M.WEIGHT_MAX,
    M.ESS,
    M.ESS_RAW,
)


def finalize(state: np.ndarray) -> dict[str, float | int | None]:
    """One cell's metrics: counts, the fractions of tokens and sequences clipped or rejected,
    mean/std (population)/min/max of the raw and applied weights, and the ESS of each,
    ``(sum w)^2 / (n sum w^2)`` over the units (None when no unit or every weight is 0)."""
    n = state[W.UNITS]
    out: dict[str, float | int | None] = {
        M.UNITS: int(n),
        M.TOKENS: int(state[W.TOKENS]),
        M.SEQUENCES: int(state[W.SEQS]),
        M.TOKEN_FRACTION: _div(state[W.TOKENS_HIT], state[W.TOKENS]),
        M.SEQUENCE_FRACTION: _div(state[W.SEQS_HIT], state[W.SEQS]),
    }
    for prefix, (s, m2, lo, hi) in zip(("raw", "weight"), _MOMENTS, strict=True):
        out[f"{prefix}_mean"] = _div(state[s], n)
        out[f"{prefix}_std"] = math.sqrt(max(state[m2], 0.0) / n) if n else None
        out[f"{prefix}_min"] = float(state[lo]) if n else None
        out[f"{prefix}_max"] = float(state[hi]) if n else None
    out[M.ESS] = _ess(state[W.APP_SUM], state[W.APP_M2], n)
    out[M.ESS_RAW] = _ess(state[W.RAW_SUM], state[W.RAW_M2], n)
    return out


def _ess(total: float, m2: float, n: float) -> float | None:
    """(sum w)^2 / (n sum w^2), with sum w^2 = m2 + (sum w)^2 / n (no cancellation)."""
    denominator = n * max(m2, 0.0) + total * total
    if n == 0 or denominator <= 0:
        return None
    return float(total * total / denominator)


def _div(a: float, b: float) -> float | None:
    return float(a / b) if b else None
