"""The report's mergeable state of one batch, reduced on the tensors' own device in float64.

The torch twin of ``stats/chunk.py`` for one group (the whole batch) and for the probability
bins (token metrics only, as the report's bin groups carry): the same per-token values, formed
by the same operations (``expm1`` for K3, the chi² terms from ``rho - 1``, the clamp and the
bounds of ``stats/tails.py``), centred second moments by two passes, extremes, the segment
columns over each row's model tokens and turns (a turn: a run of model tokens in a row, as
``ingest`` derives them), and the r-histogram from the bounds of ``stats/histogram.py``'s
compiled lookup (``index_tables``), so every token lands in the bin the report gives it. Sums
are in another order than the report's, so the numbers agree to rounding (about 1e-15
relative), not bit for bit.

Only the aggregates are copied to the host: one state vector, one histogram and a state per
probability bin (about 600 KB), in one transfer. torch is imported by no module of the package:
a tensor can only reach this code when the caller has imported torch.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from mismatchctl.stats import hist_lookup, histogram
from mismatchctl.stats.state import (
    EXP_MAX,
    LOW_PROB_THRESHOLD,
    MAX_COLS,
    MIN_COLS,
    N_FIELDS,
    RATIO_CLAMP,
    Col,
    empty_state,
)
from mismatchctl.stats.tails import Tails


@dataclass
class BatchState:
    """One batch's aggregates on the host: the whole batch's state vector, and per probability
    bin a state (token columns only) and an r-histogram (the whole batch's is their sum)."""

    state: np.ndarray  # float64 [N_FIELDS]
    bins: np.ndarray  # float64 [n_bins, N_FIELDS]
    hists: np.ndarray  # int64 [n_bins, histogram.N_BINS]

    @classmethod
    def empty(cls, n_bins: int) -> BatchState:
        return cls(
            empty_state(), empty_state(n_bins), np.zeros((n_bins, histogram.N_BINS), np.int64)
        )


def torch_module() -> Any:
    return sys.modules["torch"]


def reduce_batch(lr2: Any, lt2: Any, keep: Any, edges: np.ndarray, tails: Tails) -> BatchState:
    """The aggregates of the model tokens (``keep``, bool ``[rows, width]``) of padded logprob
    tensors ``lr2`` / ``lt2`` (rollout, trainer) on their device."""
    torch = torch_module()
    f64 = torch.float64
    lr, lt = lr2[keep].to(f64), lt2[keep].to(f64)  # the one wait: the count of model tokens
    n_bins = len(edges) - 1
    if lr.numel() == 0:
        return BatchState.empty(n_bins)
    rows_n, width = keep.shape
    row = torch.arange(rows_n, device=keep.device).unsqueeze(1).expand(rows_n, width)[keep]
    before = torch.zeros_like(keep)
    before[:, 1:] = keep[:, :-1]
    turn_start = (keep & ~before)[keep]
    c = _token_columns(lr, lt, tails)
    whole = torch.as_tensor(empty_state(1), device=lr.device)
    _token_state(whole, c, None, 1)
    _segment_state(whole[0], lr, lt, c, row, turn_start, rows_n)
    bins = torch.as_tensor(empty_state(n_bins), device=lr.device)
    inner = torch.as_tensor(edges[1:-1], dtype=f64, device=lr.device)
    code = torch.bucketize(c["pr"], inner, right=True)
    _token_state(bins, c, code, n_bins)
    cells = code * histogram.N_BINS + _hist_index(c["r"])
    hists = torch.bincount(cells, minlength=n_bins * histogram.N_BINS)
    # one transfer; counts up to 2**53 are exact in float64
    packed = torch.cat([whole.reshape(-1), bins.reshape(-1), hists.to(f64)]).cpu().numpy()
    state, rest = packed[:N_FIELDS], packed[N_FIELDS:]
    per_bin = rest[: n_bins * N_FIELDS].reshape(n_bins, N_FIELDS)
    counts = rest[n_bins * N_FIELDS :].astype(np.int64).reshape(n_bins, histogram.N_BINS)
    return BatchState(state.copy(), per_bin.copy(), counts)


def _token_columns(lr: Any, lt: Any, tails: Tails) -> dict[str, Any]:
    """``stats.chunk.token_columns`` on tensors: r, K3 and every summed column."""
    torch = torch_module()
    r = lt - lr
    rho_m1 = torch.expm1(r)
    k3 = rho_m1 - r
    pr, pt = torch.exp(lr), torch.exp(lt)
    dp = (pt - pr).abs()
    abs_r = r.abs()
    chi2 = (rho_m1 + 2.0) * rho_m1
    big = abs_r > RATIO_CLAMP
    chi2 = torch.where(big, torch.expm1(2.0 * r.clamp(-RATIO_CLAMP, RATIO_CLAMP)), chi2)
    clamped = r.clamp(-tails.clamp, tails.clamp)
    lo, hi = tails.log_bounds
    sums = {
        Col.K3_SUM: k3,
        Col.R_SUM: r,
        Col.ABS_R_SUM: abs_r,
        Col.CHI2_SUM: chi2,
        Col.RHO_M1_SUM: rho_m1,
        Col.DP_SUM: dp,
        Col.LOW_PROB: (pr < LOW_PROB_THRESHOLD).to(r.dtype),
        Col.R_OVERFLOW: (r > EXP_MAX).to(r.dtype),
        Col.PR_SUM: pr,
        Col.PT_SUM: pt,
        Col.K3_CLAMP_SUM: torch.where(abs_r > tails.clamp, torch.expm1(clamped) - clamped, k3),
        Col.EXTREME: (abs_r > tails.log_tau).to(r.dtype),
        Col.IS_OOB: ((r < lo) | (r > hi)).to(r.dtype),
    }
    return {"r": r, "k3": k3, "pr": pr, "pt": pt, "dp": dp, "sums": sums}


class _Groups:
    """Per-group sums and extremes of per-token values: one group (``code`` None: plain
    reductions, pairwise sums) or ``size`` groups by a per-token code."""

    def __init__(self, code: Any, size: int, like: Any) -> None:
        torch = torch_module()
        self.code, self.size, self.like = code, size, like
        if code is None:
            self.n = torch.full((1,), float(like.numel()), dtype=like.dtype, device=like.device)
        else:
            self.n = self.sum(torch.ones_like(like))

    def sum(self, values: Any) -> Any:
        """Per-group sums of 1-D ``values`` (one column at a time: no stacked copy)."""
        if self.code is None:
            return values.sum().reshape(1)
        out = torch_module().zeros(self.size, dtype=values.dtype, device=values.device)
        # scatter_add_: bincount scans the codes for their range on every call
        return out.scatter_add_(0, self.code, values)

    def extreme(self, values: Any, kind: str) -> Any:
        torch = torch_module()
        empty = float("inf") if kind == "amin" else float("-inf")
        out = torch.full((self.size,), empty, dtype=values.dtype, device=values.device)
        if values.numel() == 0:
            return out
        if self.code is None:
            return (values.min() if kind == "amin" else values.max()).reshape(1)
        return out.scatter_reduce_(0, self.code, values, kind, include_self=True)

    def centred(self, x: Any, total: Any) -> tuple[Any, Any]:
        """Deviations from the group mean and their sum of squares (two passes, as chunk)."""
        torch = torch_module()
        mean = total / torch.where(self.n > 0, self.n, torch.ones_like(self.n))
        dx = x - (mean if self.code is None else mean[self.code])
        return dx, self.sum(dx * dx)


def _token_state(t: Any, c: dict[str, Any], code: Any, size: int) -> None:
    """``stats.chunk.fill_token_state`` into the rows of ``t``."""
    red = _Groups(code, size, c["r"])
    t[:, Col.TOKENS] = red.n
    for col, values in c["sums"].items():
        t[:, col] = red.sum(values)
    t[:, Col.R_M2] = red.centred(c["r"], t[:, Col.R_SUM])[1]
    _pair_moments(
        t, red, c["pr"], c["pt"], (Col.PR_SUM, Col.PT_SUM, Col.PR_M2, Col.PT_M2, Col.PRPT_C)
    )
    for col, values in ((Col.R_MIN, c["r"]), (Col.R_MAX, c["r"]), (Col.DP_MAX, c["dp"])):
        t[:, col] = red.extreme(values, "amin" if col.name.endswith("_MIN") else "amax")
    for col, values in ((Col.PR_MIN, c["pr"]), (Col.PR_MAX, c["pr"]), (Col.PT_MIN, c["pt"]),
                        (Col.PT_MAX, c["pt"])):  # fmt: skip
        t[:, col] = red.extreme(values, "amin" if col.name.endswith("_MIN") else "amax")
    _empty_extremes(t, red.n)


def _pair_moments(t: Any, red: _Groups, x: Any, y: Any, cols: tuple[Col, ...]) -> None:
    sum_x, sum_y, m2_x, m2_y, c_xy = cols
    dx, t[:, m2_x] = red.centred(x, t[:, sum_x])
    dy, t[:, m2_y] = red.centred(y, t[:, sum_y])
    t[:, c_xy] = red.sum(dx * dy)


def _empty_extremes(t: Any, n: Any) -> None:
    """Groups without tokens hold the empty state's extremes (+inf minima, -inf maxima)."""
    empty = n == 0
    for cols, value in ((MIN_COLS, float("inf")), (MAX_COLS, float("-inf"))):
        for col in cols.tolist():
            t[empty, col] = value


def _segment_state(
    s: Any, lr: Any, lt: Any, c: dict[str, Any], row: Any, turn_start: Any, rows_n: int
) -> None:
    """``stats.chunk.fill_segment_state`` for one group whose segments are the rows."""
    torch = torch_module()
    r, k3 = c["r"], c["k3"]
    per_row = _Groups(row, rows_n, r)
    has = per_row.n > 0
    ratios = _turn_ratios(r, row, turn_start)
    length = per_row.n[has]
    lr_sum, lt_sum, r_sum, k3_sum, ratio_sum = (
        per_row.sum(x)[has] for x in (lr, lt, r, k3, ratios)
    )
    rlp, tlp, d = -lr_sum / length, -lt_sum / length, -r_sum / length
    seg = _Groups(None, 1, rlp)
    s[Col.SEGMENTS] = float(rlp.numel())
    s[Col.SEG_K3_MEAN_SUM] = (k3_sum / length).sum()
    s[Col.RLP_SUM], s[Col.TLP_SUM] = rlp.sum(), tlp.sum()
    s[Col.RPPL_SUM], s[Col.TPPL_SUM] = torch.exp(rlp).sum(), torch.exp(tlp).sum()
    s[Col.D_SUM], s[Col.ABS_D_SUM], s[Col.PPL_RATIO_SUM] = (
        d.sum(),
        d.abs().sum(),
        torch.exp(d).sum(),
    )
    s[Col.CHI2_SEQ_SUM] = torch.expm1(2.0 * r_sum.clamp(-RATIO_CLAMP, RATIO_CLAMP)).sum()
    s[Col.RATIO_SEG_SUM] = (ratio_sum / length).sum()
    t = s.unsqueeze(0)
    _pair_moments(
        t, seg, rlp, tlp, (Col.RLP_SUM, Col.TLP_SUM, Col.RLP_M2, Col.TLP_M2, Col.RLPTLP_C)
    )
    for col, values in ((Col.RLP_MIN, rlp), (Col.RLP_MAX, rlp), (Col.TLP_MIN, tlp),
                        (Col.TLP_MAX, tlp)):  # fmt: skip
        t[:, col] = seg.extreme(values, "amin" if col.name.endswith("_MIN") else "amax")


def _turn_ratios(r: Any, row: Any, turn_start: Any) -> Any:
    """Every token's ``exp(mean r over its turn)`` (``stats.chunk._turn_ratios``)."""
    torch = torch_module()
    turn = torch.cumsum(turn_start.to(torch.int64), 0) - 1
    runs = _Groups(turn, r.numel(), r)  # at most one turn a token: no wait for their count
    mean = runs.sum(r) / torch.where(runs.n > 0, runs.n, torch.ones_like(runs.n))
    return torch.exp(mean)[turn]


def _hist_index(r: Any) -> Any:
    """``stats.histogram.hist_index`` from the bounds of its compiled lookup: the level of
    ``|r|`` is the count of bounds at or below it, minus one (-1: below 1e-9)."""
    torch = torch_module()
    tables = hist_lookup.index_tables()
    if tables is None:  # a platform log10 the lookup cannot follow: the numpy bins on the host
        return torch.as_tensor(histogram.hist_index(r.cpu().numpy()), device=r.device)
    bounds = torch.as_tensor(tables.bounds[1:-1], dtype=r.dtype, device=r.device)
    level = torch.bucketize(r.abs(), bounds, right=True) - 1
    return histogram.ZERO_BIN + torch.sign(r).to(torch.int64) * (level + 2)
