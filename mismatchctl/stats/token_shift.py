"""A signed shift of ``r`` on some tokens: what a logit processor applied on one side only leaves
(a logit bias or a bad-words mask on some token ids; a repetition, frequency or presence penalty
on the tokens seen before in the response), as a mergeable state.

Per token id: the model tokens, the sums of ``r``, ``r^2`` and K3. Per probability bin, the tokens
whose id already occurred earlier in the same response ("seen") and the others: tokens, sum of
``r`` and of ``r^2``. A token is seen when an earlier model token of its sequence in the same
part has its id; parts keep a sequence's tokens together and in order (docs/store.md), so the
flag is exact. Tokens without an id (a dump without token ids) are counted apart and enter
neither.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mismatchctl.stats import per_token


@dataclass
class TokenShiftState:
    """Sums per token id (index = id; ``n``, ``r``, ``rr``, ``k3``), per (seen?, bin) (``seen``:
    [2, bins, 3] of tokens, sum r, sum r^2) and the tokens without an id."""

    n: np.ndarray = field(default_factory=lambda: np.zeros(0))
    r: np.ndarray = field(default_factory=lambda: np.zeros(0))
    rr: np.ndarray = field(default_factory=lambda: np.zeros(0))
    k3: np.ndarray = field(default_factory=lambda: np.zeros(0))
    seen: np.ndarray = field(default_factory=lambda: np.zeros((2, 0, 3)))
    without_id: int = 0

    def merge(self, other: TokenShiftState) -> TokenShiftState:
        size = max(len(self.n), len(other.n))
        bins = max(self.seen.shape[1], other.seen.shape[1])

        def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            out = np.zeros(size)
            out[: len(a)] += a
            out[: len(b)] += b
            return out

        seen = np.zeros((2, bins, 3))
        seen[:, : self.seen.shape[1]] += self.seen
        seen[:, : other.seen.shape[1]] += other.seen
        return TokenShiftState(
            add(self.n, other.n), add(self.r, other.r), add(self.rr, other.rr),
            add(self.k3, other.k3), seen, self.without_id + other.without_id,
        )  # fmt: skip


def seen_before(ids: np.ndarray, seq: np.ndarray, starts: np.ndarray | None = None) -> np.ndarray:
    """Whether each token's id (>= 0) occurred earlier in its sequence (rows in sequence order,
    a sequence's rows contiguous): one compiled walk (``diagnose_kernels.seen_before``), no
    sort."""
    from mismatchctl.stats import diagnose_kernels

    out = np.zeros(len(ids), bool)
    if len(ids) == 0:
        return out
    ids = np.ascontiguousarray(ids, np.int64)
    if starts is None:
        starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    last = np.zeros(int(ids.max()) + 1, np.int64)
    diagnose_kernels.seen_before(ids, starts, last, out)
    return out


def token_shift_state(
    ids: np.ndarray,
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    bins: np.ndarray,
    n_bins: int,
    k3: np.ndarray | None = None,
    r: np.ndarray | None = None,
    starts: np.ndarray | None = None,
) -> TokenShiftState:
    """One part's state; ``ids`` -1 where the token has no id; ``k3`` and ``r``: each token's
    ``expm1(r) - r`` and ``lt - lr`` when the caller has them, ``starts``: each sequence's first
    row (used when every token has an id)."""
    known = ids >= 0
    every = bool(known.all())  # the usual case: no copies
    r = lt - lr if r is None else r
    r = r if every else r[known]
    k = ids.astype(np.int64, copy=False) if every else ids[known].astype(np.int64)
    size = int(k.max()) + 1 if len(k) else 0
    with np.errstate(over="ignore", invalid="ignore"):
        if k3 is None:
            k3 = per_token.k3(r)
        elif not every:
            k3 = k3[known]
    seen = np.zeros((2, n_bins, 3))
    flag = seen_before(k, *((seq, starts) if every else (seq[known],))).astype(np.int64)
    cell = flag * n_bins + (bins if every else bins[known])
    r2 = r * r  # once for both sums
    for j, w in enumerate((np.ones_like(r), r, r2)):
        seen[..., j] = np.bincount(cell, w, 2 * n_bins).reshape(2, n_bins)
    return TokenShiftState(
        np.bincount(k, minlength=size).astype(np.float64),
        np.bincount(k, r, size), np.bincount(k, r2, size), np.bincount(k, k3, size),
        seen, int((~known).sum()),
    )  # fmt: skip


@dataclass(frozen=True)
class IdShift:
    """A token id whose ``r`` is shifted: its tokens, mean ``r``, its z (token-level) and the
    share of the K3 mass it carries."""

    token_id: int
    tokens: int
    mean: float
    z: float
    mass_share: float


def shifted_ids(
    state: TokenShiftState, min_tokens: int, min_shift: float, z: float
) -> list[IdShift]:
    """The ids with at least ``min_tokens`` tokens whose mean ``r`` is at least ``min_shift``
    from 0 with ``|z|`` at least ``z`` (token-level standard error), most mass first."""
    n, total = state.n, float(np.nansum(state.k3))
    ok = n >= min_tokens
    out = []
    for i in np.flatnonzero(ok):
        mean = state.r[i] / n[i]
        var = max(state.rr[i] / n[i] - mean * mean, 1e-300) * n[i] / max(n[i] - 1, 1)
        zi = mean / math.sqrt(var / n[i])
        if abs(mean) >= min_shift and abs(zi) >= z:
            share = float(state.k3[i] / total) if total > 0 else math.nan
            out.append(IdShift(int(i), int(n[i]), float(mean), float(zi), share))
    return sorted(out, key=lambda s: -s.mass_share)


@dataclass(frozen=True)
class SeenShift:
    """Mean ``r`` of the tokens seen before in their response minus that of the others at the
    same probability bin (weighted by the seen tokens), its z, and the seen tokens' share."""

    shift: float
    z: float
    seen_share: float


def seen_shift(state: TokenShiftState) -> SeenShift | None:
    seen = state.seen
    n0, n1 = seen[0, :, 0], seen[1, :, 0]
    both = (n0 > 1) & (n1 > 1)
    if not both.any():
        return None
    m0 = seen[0, both, 1] / n0[both]
    m1 = seen[1, both, 1] / n1[both]
    v0 = np.maximum(seen[0, both, 2] / n0[both] - m0 * m0, 0.0)
    v1 = np.maximum(seen[1, both, 2] / n1[both] - m1 * m1, 0.0)
    w = n1[both] / n1[both].sum()
    shift = float((w * (m1 - m0)).sum())
    se = math.sqrt(float((w * w * (v1 / n1[both] + v0 / n0[both])).sum()))
    total = float(n0.sum() + n1.sum())
    return SeenShift(shift, shift / se if se > 0 else 0.0, float(n1.sum()) / total)


def id_shift_share(state: TokenShiftState, min_tokens: int) -> float | None:
    """The share of ``r``'s variance that a shift of its own for each token id carries: over
    the ids with at least ``min_tokens`` tokens, each id's mean ``r`` about the run's, squared
    and times its tokens, less its sampling variance (what the mean of that many independent
    tokens scatters by), over the tokens' sum of squares about the run's mean. Near 0 when the
    ids share one distribution (numeric noise, another policy's context-dependent shifts); a
    logit processor on some ids shifts them alike in every context. None: no id has enough
    tokens, or ``r`` does not vary."""
    n, total = state.n, float(state.n.sum())
    ok = n >= min_tokens
    if not ok.any() or total <= 0:
        return None
    mean = float(state.r.sum()) / total
    spread = float(state.rr.sum()) - total * mean * mean
    if not spread > 0:
        return None
    m = state.r[ok] / n[ok]
    var = np.maximum(state.rr[ok] / n[ok] - m * m, 0.0) * n[ok] / np.maximum(n[ok] - 1, 1)
    fitted = float((n[ok] * (m - mean) ** 2 - var).sum())
    return max(fitted, 0.0) / spread
