"""The signed side of a part of the run: whether its excess is a shift that removes probability
mass (a logit processor, a mask, a truncation on one side) or noise of a larger scale (a code
path, a kernel, a dtype).

The K3 cube holds ``K3 = exp(r) - 1 - r`` only; the sign of ``r`` and the mean ratio are lost
there. This state keeps, per sequence and per *cell* (turn index, KV position, position in the
turn, sequence length, probability bin), the tokens, those with ``r < 0``, the sum of
``exp(r) - 1`` and the sum of K3 (``SignedParts``), so any part of the run on those dimensions
(and the steps) can be weighed once the localization has named it (``one_signed``).

Why the mean ratio: the dumps' tokens are sampled from the rollout side's distribution ``q``,
so when the trainer's ``p`` is a distribution over the same tokens, ``E_q[p/q] = 1`` exactly,
however large the noise between them: ``mean(exp(r) - 1)`` is 0 up to sampling error, and for
noise that error is at most about the K3 the sample holds (``E[exp(r) - 1] = E[r] + E[K3]``: a
finite sample misses the rare large positive ``r`` that balance the others). A mask or a
truncation on one side removes a mass ``b`` of each context: the kept tokens' ``r`` is
``log(1 - b)``, the mean ratio falls by ``b`` while the K3 rises by only about ``b^2 / 2``. A
deficit many times the part's excess K3 is mass removed, not noise; the share of the part's
tokens below zero rises with it (the rollout side higher on every kept token).

Standard errors treat each sequence as a cluster (``stats.offset``): tokens of one context are
not independent."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mismatchctl.stats.reduce import run_starts
from mismatchctl.stats.whatif import RATIO_LOG_CLAMP

FIELDS = ("turn", "kv_position", "turn_position", "length", "bin")
"""The cell's dimensions: per-token codes (the turn index, the bins of the KV position, of the
position in the turn and of the sequence length, the probability bin)."""

TURN_POSITION_EDGES = (0, 8, 16, 64, 256, 1024)
"""The bins of the position in the turn: the cube's (0, 16, 64, 256, 1024) with the first 8
tokens apart (the turn edges' burst)."""

MIN_REST = 20
"""Tokens of the rest a probability bin needs for its rates to stand for the part's tokens
there: the part's tokens in a bin with fewer are left out."""

N_SUMS = 4  # per row: tokens, tokens with r < 0, sum of exp(r) - 1, sum of K3


@dataclass
class SignedRows:
    """Per row (a sequence's cell with tokens): the sequence, its step, the cell's codes
    (``cells``, columns ``FIELDS``) and the sums (``N_SUMS`` columns)."""

    seq: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    step: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cells: np.ndarray = field(default_factory=lambda: np.zeros((0, len(FIELDS)), np.int64))
    sums: np.ndarray = field(default_factory=lambda: np.zeros((0, N_SUMS)))


@dataclass
class SignedParts:
    """Each run's rows, as the parts read them: a merge joins the lists (no copy of the rows
    read before), :meth:`rows` concatenates a run's once it is asked for."""

    runs: dict[str, list[SignedRows]] = field(default_factory=dict)

    def merge(self, other: SignedParts) -> SignedParts:
        out = {run: list(rows) for run, rows in self.runs.items()}
        for run, rows in other.runs.items():
            out.setdefault(run, []).extend(rows)
        return SignedParts(out)

    def rows(self, run: str) -> SignedRows:
        found = self.runs.get(run, [])
        if len(found) != 1:
            found = [SignedRows(*(np.concatenate([getattr(x, f) for x in found]) for f in
                                  ("seq", "step", "cells", "sums")))] if found else [SignedRows()]  # fmt: skip
            self.runs[run] = found
        return found[0]


def signed_parts(
    run: str, r: np.ndarray, k3: np.ndarray, seq: np.ndarray, step: np.ndarray, cells: np.ndarray
) -> SignedParts:
    """The rows of one chunk of tokens of run ``run`` (each sequence's tokens contiguous, a
    turn's positions ascending): ``cells`` holds each token's codes (``FIELDS`` columns). A new
    row starts where the sequence or a code changes, so the sums are one ``bincount`` over the
    tokens; tokens whose ``r`` is not finite are left out."""
    ok = np.isfinite(r) & np.isfinite(k3)
    if not ok.all():
        r, k3, seq, step, cells = r[ok], k3[ok], seq[ok], step[ok], cells[ok]
    if len(r) == 0:
        return SignedParts()
    keys = np.column_stack([seq, cells[:, :-1]])
    change = np.r_[True, np.any(keys[1:] != keys[:-1], axis=1)]
    segment = np.cumsum(change) - 1
    bins = int(cells[:, -1].max()) + 1
    row = segment * bins + cells[:, -1]
    size = (int(segment[-1]) + 1) * bins
    q = np.expm1(np.clip(r, -RATIO_LOG_CLAMP, RATIO_LOG_CLAMP))
    sums = np.column_stack([
        np.bincount(row, minlength=size),
        np.bincount(row, r < 0, minlength=size),
        np.bincount(row, q, minlength=size),
        np.bincount(row, k3, minlength=size),
    ]).astype(np.float64)  # fmt: skip
    kept = np.flatnonzero(sums[:, 0])
    first = run_starts(segment)[kept // bins]
    out_cells = np.column_stack([cells[first, :-1], kept % bins])
    return SignedParts({run: [SignedRows(seq[first], step[first], out_cells, sums[kept])]})


@dataclass(frozen=True)
class OneSigned:
    """A part against the rest at the same probability bins: its tokens; the mean of
    ``exp(r) - 1`` over its tokens less the rest's (``deficit``, negative when mass is
    removed) with its z (sequence-clustered); its K3 per token above the rest's
    (``excess_k3``); the share of its tokens below zero, the rest's at the same bins, and the
    difference's z."""

    tokens: int
    deficit: float
    deficit_z: float
    excess_k3: float
    below: float
    below_expected: float
    below_z: float

    @property
    def deficit_per_k3(self) -> float:
        """The mass the part's mean ratio lacks per unit of its excess K3 (inf: no excess)."""
        if self.excess_k3 <= 0:
            return math.inf
        return -self.deficit / self.excess_k3


def one_signed(state: SignedRows, part: np.ndarray) -> OneSigned | None:
    """The part (``part``: a mask over the state's rows) against the rest, per probability
    bin; None when no bin holds both the part's tokens and ``MIN_REST`` of the rest's."""
    if len(state.seq) == 0:
        return None
    b = state.cells[:, -1]
    nb = int(b.max()) + 1
    n, neg, q, k3 = (state.sums[:, i] for i in range(N_SUMS))

    def per_bin(w: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return np.bincount(b[mask], w[mask], nb)

    n_p, n_r = per_bin(n, part), per_bin(n, ~part)
    used = (n_p > 0) & (n_r >= MIN_REST)
    tokens = float(n_p[used].sum())
    if tokens == 0:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.where(used, n_p / tokens, 0.0)  # the part's token mix
        means = [(per_bin(x, part) / n_p, per_bin(x, ~part) / n_r) for x in (q, neg, k3)]
    (q_p, q_r), (neg_p, neg_r), (k_p, k_r) = ((np.where(used, a, 0.0), np.where(used, c, 0.0))
                                              for a, c in means)  # fmt: skip
    rows = used[b]
    deficit_z = _clustered_z(state, part, rows, q, n, w, n_p, n_r, q_p, q_r)
    below_z = _clustered_z(state, part, rows, neg, n, w, n_p, n_r, neg_p, neg_r)
    return OneSigned(
        int(tokens),
        float(w @ (q_p - q_r)),
        deficit_z,
        float(w @ (k_p - k_r)),
        float(w @ neg_p),
        float(w @ neg_r),
        below_z,
    )


def _clustered_z(
    state: SignedRows,
    part: np.ndarray,
    rows: np.ndarray,
    x: np.ndarray,
    n: np.ndarray,
    w: np.ndarray,
    n_p: np.ndarray,
    n_r: np.ndarray,
    m_p: np.ndarray,
    m_r: np.ndarray,
) -> float:
    """The z of ``sum_b w_b (m_p[b] - m_r[b])``, each sequence a cluster: the difference is a
    sum over tokens (a part token's ``x`` over the part's tokens, less a rest token's weighted
    by its bin's ``w_b / n_r``), so its variance is ``k / (k - 1)`` times the sum over
    sequences of their centered contributions squared."""
    b = state.cells[:, -1]
    with np.errstate(invalid="ignore", divide="ignore"):
        own = np.where(part, (x - n * m_p[b]) / n_p[b] * w[b], -(x - n * m_r[b]) * w[b] / n_r[b])
    own = np.where(rows, own, 0.0)
    cluster = np.unique(state.seq, return_inverse=True)[1].reshape(-1)
    per_seq = np.bincount(cluster, own)
    k = len(per_seq)
    diff = float(w @ (m_p - m_r))
    var = k / (k - 1) * float(per_seq @ per_seq) if k > 1 else 0.0
    if var <= 0:
        return 0.0 if diff == 0 else math.copysign(math.inf, diff)
    return diff / math.sqrt(var)


@dataclass(frozen=True)
class RateRatio:
    """A part's K3 rate against a reference's at the same probability bins: ``ratio`` (observed
    over what the reference's rates predict), its 95% interval (each sequence a cluster), the
    part's tokens."""

    ratio: float
    ci: tuple[float, float]
    tokens: int


def rate_ratio(state: SignedRows, part: np.ndarray, reference: np.ndarray) -> RateRatio | None:
    """The part's K3 over what the reference's rate in each probability bin predicts for its
    tokens; None when no bin holds both (``MIN_REST`` of the reference's) or the reference
    holds no K3. The interval is the delta method's on the log ratio, each sequence's
    observed and predicted sums a cluster (the reference's own rates taken as known)."""
    if len(state.seq) == 0:
        return None
    b = state.cells[:, -1]
    nb = int(b.max()) + 1
    n, k3 = state.sums[:, 0], state.sums[:, 3]
    n_ref = np.bincount(b[reference], n[reference], nb)
    rate = np.divide(np.bincount(b[reference], k3[reference], nb), n_ref, where=n_ref > 0,
                     out=np.zeros(nb))  # fmt: skip
    rows = part & (n_ref >= MIN_REST)[b]
    observed, predicted = k3[rows], n[rows] * rate[b[rows]]
    total_o, total_e = float(observed.sum()), float(predicted.sum())
    if total_e <= 0 or total_o <= 0:
        return None
    ratio = total_o / total_e
    cluster = np.unique(state.seq[rows], return_inverse=True)[1].reshape(-1)
    resid = np.bincount(cluster, observed - ratio * predicted)
    k = len(resid)
    se = math.sqrt(k / (k - 1) * float(resid @ resid)) / total_o if k > 1 else math.inf
    ci = (ratio * math.exp(-1.96 * se), ratio * math.exp(1.96 * se))
    return RateRatio(ratio, ci, int(n[rows].sum()))
