"""Vectorized computation of one ``Partial`` per group from one chunk of model tokens.

Every per-group quantity is a sum, a count, a centred second moment (second pass around the group
mean) or an extreme, computed by ``GroupReducer``: O(tokens) numpy work with no Python loop over
tokens or sequences. Only groups present in the chunk are computed (codes are compacted first),
so a chunk touching 3 of 10,000 step groups costs the same as one with 3 groups.

Segments (the tokens of one sequence that fall in one group) must be contiguous runs. They are
already when each sequence visits its groups in increasing code order and groups come in long runs
(one group per sequence, turn kinds, turn indices: the common cases). Otherwise (e.g. probability
bins, which interleave) the tokens are first stably sorted by group with a 16-bit radix sort: that
makes every group and every segment contiguous, and the reductions run on long runs.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from mismatchctl.stats import exp_poly, histogram
from mismatchctl.stats.partial import Partial
from mismatchctl.stats.reduce import MIN_MEAN_RUN, GroupReducer, run_starts
from mismatchctl.stats.state import EXP_MAX, LOW_PROB_THRESHOLD, RATIO_CLAMP, Col, empty_state
from mismatchctl.stats.tails import DEFAULT_TAILS, Tails

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class Layout(NamedTuple):
    """Tokens in an order where every segment is one run, and where those runs start."""

    lr: np.ndarray
    lt: np.ndarray
    seq: np.ndarray
    code: np.ndarray
    seg_starts: np.ndarray
    turn: np.ndarray


def chunk_partials(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    group: np.ndarray,
    n_groups: int,
    *,
    with_hist: bool = False,
    turn: np.ndarray | None = None,
    tails: Tails = DEFAULT_TAILS,
) -> list[Partial]:
    """One Partial per group code ``0..n_groups-1`` from one chunk of model tokens.

    ``lr``/``lt``: rollout/trainer logprobs (finite); ``seq``: sequence id per token (a sequence's
    tokens are contiguous and the chunk holds whole sequences); ``group``: group code per token;
    ``turn``: turn index per token (None: each sequence is one turn), for the turn ratios of
    ``ratio_segment_mean``; ``tails``: the thresholds of the tail-robust metrics.
    Sequence metrics are computed over segments = the tokens of one sequence in one group.
    """
    lr, lt, seq, group = _checked(lr, lt, seq, group, n_groups)
    if len(lr) == 0:
        return [Partial.empty(with_hist) for _ in range(n_groups)]
    turn = np.zeros(len(lr), np.int64) if turn is None else np.asarray(turn, np.int64)
    present, code = _compact(group, n_groups)
    g = len(present)
    table = empty_state(g)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported as inf, by design
        lay = _layout(lr, lt, seq, code, g, turn)
        c = token_columns(lay.lr, lay.lt, tails=tails)
        fill_token_state(table, c, GroupReducer.from_index(lay.code, g))
        m = len(lay.seg_starts)
        segments = GroupReducer(lay.seg_starts, np.arange(m), len(lay.code), m)
        _segment_columns(table, lay, c.r, c.k3, segments)
    hists = histogram.histogram(c.r, lay.code, g) if with_hist else None
    return expand(table, hists, present, n_groups, with_hist)


def _checked(
    lr: np.ndarray, lt: np.ndarray, seq: np.ndarray, group: np.ndarray, n_groups: int
) -> Arrays:
    lr, lt = np.asarray(lr, dtype=np.float64), np.asarray(lt, dtype=np.float64)
    seq, group = np.asarray(seq, dtype=np.int64), np.asarray(group, dtype=np.int64)
    if any(a.ndim != 1 or len(a) != len(lr) for a in (lt, seq, group)):
        shapes = ", ".join(str(a.shape) for a in (lr, lt, seq, group))
        raise ValueError(f"lr, lt, seq and group must be 1-D of one length (found {shapes})")
    if n_groups < 1:
        raise ValueError(f"n_groups must be at least 1 (found {n_groups})")
    if len(group) and (group.min() < 0 or group.max() >= n_groups):
        found = f"{group.min()}..{group.max()}"
        raise ValueError(f"group codes must lie in 0..{n_groups - 1} (found {found})")
    if not (np.isfinite(lr).all() and np.isfinite(lt).all()):
        raise ValueError("logprobs must be finite (found NaN or infinity)")
    return lr, lt, seq, group


def _compact(group: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes of the groups present, and every token's code renumbered to 0..len(present)-1."""
    present = np.flatnonzero(np.bincount(group, minlength=n_groups))
    if len(present) == n_groups:
        return present, group
    remap = np.zeros(n_groups, dtype=np.int64)
    remap[present] = np.arange(len(present))
    return present, remap[group]


class TokenColumns(NamedTuple):
    """Per-token values every grouping reduces, computed once per slice of tokens."""

    lr: np.ndarray
    lt: np.ndarray
    r: np.ndarray
    k3: np.ndarray
    pr: np.ndarray
    pt: np.ndarray
    dp: np.ndarray
    sums: dict[Col, np.ndarray]  # the summed columns of the state, per token


def token_columns(
    lr: np.ndarray, lt: np.ndarray, pr: np.ndarray | None = None, tails: Tails = DEFAULT_TAILS
) -> TokenColumns:
    """``r = lt - lr`` and everything derived from it and from the probabilities (``pr``:
    ``exp(lr)`` when the caller has it already; ``tails``: the tail-robust thresholds)."""
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported as inf, by design
        r = lt - lr
        # expm1, not exp - 1: keeps K3 accurate when |r| is tiny; exp_poly's (numpy) for K3
        # and the probabilities, as the report's compiled loop takes them (the same bits)
        rho_m1 = exp_poly.expm1(r)
        k3 = rho_m1 - r
        pr = exp_poly.exp(lr) if pr is None else pr
        pt = exp_poly.exp(lt)
        dp = np.subtract(pt, pr)
        np.abs(dp, out=dp)
        abs_r = np.abs(r)
        sums = {
            Col.K3_SUM: k3,
            Col.R_SUM: r,
            Col.ABS_R_SUM: abs_r,
            Col.CHI2_SUM: _chi2_from_rho(r, rho_m1, abs_r),
            Col.RHO_M1_SUM: rho_m1,
            Col.DP_SUM: dp,
            Col.LOW_PROB: (pr < LOW_PROB_THRESHOLD).astype(np.float64),
            Col.R_OVERFLOW: (r > EXP_MAX).astype(np.float64),
            Col.PR_SUM: pr,
            Col.PT_SUM: pt,
            **_tail_columns(r, k3, abs_r, tails),
        }
    return TokenColumns(lr, lt, r, k3, pr, pt, dp, sums)


def fill_token_state(t: np.ndarray, c: TokenColumns, red: GroupReducer) -> None:
    """The token columns of state table ``t``: counts, sums, centred moments, extremes."""
    with np.errstate(over="ignore", invalid="ignore"):
        n = t[:, Col.TOKENS] = red.counts()
        for col, values in c.sums.items():
            t[:, col] = red.sum(values)
        t[:, Col.R_M2] = red.centred(c.r, t[:, Col.R_SUM], n)[1]
        _pair_moments(
            t, red, c.pr, c.pt, (Col.PR_SUM, Col.PT_SUM, Col.PR_M2, Col.PT_M2, Col.PRPT_C)
        )
        _extremes(t, red, [(Col.R_MIN, c.r), (Col.R_MAX, c.r), (Col.DP_MAX, c.dp)])
        _extremes(
            t, red, [(Col.PR_MIN, c.pr), (Col.PR_MAX, c.pr), (Col.PT_MIN, c.pt), (Col.PT_MAX, c.pt)]
        )


def _tail_columns(
    r: np.ndarray, k3: np.ndarray, abs_r: np.ndarray, tails: Tails
) -> dict[Col, np.ndarray]:
    """Per token: K3 of the clamped r, whether ``|r| > ln(tau)``, whether the ratio is outside
    the IS bounds (``stats.tails``)."""
    clamped = np.clip(r, -tails.clamp, tails.clamp)
    k3_clamped = np.where(abs_r > tails.clamp, exp_poly.expm1(clamped) - clamped, k3)  # its K3
    lo, hi = tails.log_bounds
    return {
        Col.K3_CLAMP_SUM: k3_clamped,
        Col.EXTREME: (abs_r > tails.log_tau).astype(np.float64),
        Col.IS_OOB: ((r < lo) | (r > hi)).astype(np.float64),
    }


def _chi2_from_rho(r: np.ndarray, rho_m1: np.ndarray, abs_r: np.ndarray) -> np.ndarray:
    """``exp(2 clamp(r, -20, 20)) - 1`` as ``(rho - 1)(rho + 1)`` (exact algebra, no second
    exponential) where ``|r| <= 20``, and from the clamped ratio beyond."""
    terms = rho_m1 + 2.0
    terms *= rho_m1
    big = abs_r > RATIO_CLAMP
    if big.any():
        terms[big] = _chi2_terms(r[big])
    return terms


def _chi2_terms(x: np.ndarray) -> np.ndarray:
    """``exp(2 clamp(x, -20, 20)) - 1``, via expm1 for accuracy near 0."""
    terms = np.clip(x, -RATIO_CLAMP, RATIO_CLAMP)
    terms *= 2.0
    return np.expm1(terms, out=terms)


def _pair_moments(
    t: np.ndarray, red: GroupReducer, x: np.ndarray, y: np.ndarray, cols: tuple[Col, ...]
) -> None:
    """Centred M2 of x and y and their co-moment, for a Pearson correlation."""
    sum_x, sum_y, m2_x, m2_y, c_xy = cols
    n = red.counts()
    dx, t[:, m2_x] = red.centred(x, t[:, sum_x], n)
    dy, t[:, m2_y] = red.centred(y, t[:, sum_y], n)
    t[:, c_xy] = red.sum(dx * dy)


def _extremes(t: np.ndarray, red: GroupReducer, cols: list[tuple[Col, np.ndarray]]) -> None:
    """Per-group min or max, as the column's name says."""
    for col, values in cols:
        t[:, col] = red.extreme(np.minimum if col.name.endswith("_MIN") else np.maximum, values)


def _segment_runs(seq: np.ndarray, code: np.ndarray) -> tuple[np.ndarray, bool]:
    """Starts of the runs of equal (sequence, group), and whether each run is a whole segment."""
    new_seq = np.concatenate(([True], seq[1:] != seq[:-1]))
    starts = np.flatnonzero(new_seq | np.concatenate(([True], code[1:] != code[:-1])))
    run_code = code[starts]
    # A run is a whole segment when no sequence comes back to a group it left.
    return starts, bool(np.all(new_seq[starts[1:]] | (run_code[1:] > run_code[:-1])))


def _layout(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    code: np.ndarray,
    n_codes: int,
    turn: np.ndarray | None = None,
) -> Layout:
    """Keep the token order if groups come in long runs and segments are runs; else sort
    (``turn``: each token's turn index, None for one turn per sequence)."""
    if turn is None:
        turn = np.zeros(len(lr), np.int64)
    if len(run_starts(code)) * MIN_MEAN_RUN <= len(code):
        starts, whole = _segment_runs(seq, code)
        if whole:
            return Layout(lr, lt, seq, code, starts, turn)
    order = group_order(code, n_codes)
    seq = seq[order]
    # sorted codes are just each code repeated by its count: cheaper than a gather
    code = np.repeat(np.arange(n_codes), np.bincount(code, minlength=n_codes))
    return Layout(lr[order], lt[order], seq, code, _segment_runs(seq, code)[0], turn[order])


def group_order(code: np.ndarray, n_codes: int) -> np.ndarray:
    """Stable permutation sorting tokens by code: LSD radix sort on 16-bit digits (O(tokens)).

    Stability keeps each sequence's tokens in order inside a group, so segments stay contiguous.
    """
    order = np.argsort((code & 0xFFFF).astype(np.uint16), kind="stable")
    shift = 16
    while n_codes > 1 << shift:
        digit = ((code[order] >> shift) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
        shift += 16
    return order


def _segment_columns(
    t: np.ndarray, lay: Layout, r: np.ndarray, k3: np.ndarray, segments: GroupReducer
) -> None:
    """Fill the segment columns of table ``t`` from per-segment sums."""
    fill_segment_state(
        t,
        segments.counts(),
        segments.sum(lay.lr),
        segments.sum(lay.lt),
        segments.sum(r),
        segments.sum(k3),
        lay.code[lay.seg_starts],
        segments.sum(_turn_ratios(lay, r)),
    )


def _turn_ratios(lay: Layout, r: np.ndarray) -> np.ndarray:
    """Every token's turn ratio ``exp(mean r over its turn run)`` (a turn run: the contiguous
    tokens of one sequence in one turn and one group)."""
    n = len(r)
    new = np.ones(n, dtype=bool)
    new[1:] = (lay.seq[1:] != lay.seq[:-1]) | (lay.turn[1:] != lay.turn[:-1])
    new[1:] |= lay.code[1:] != lay.code[:-1]
    starts = np.flatnonzero(new)
    lengths = np.diff(starts, append=n)
    return np.repeat(np.exp(np.add.reduceat(r, starts) / lengths), lengths)


def fill_segment_state(
    t: np.ndarray,
    length: np.ndarray,
    lr_sum: np.ndarray,
    lt_sum: np.ndarray,
    r_sum: np.ndarray,
    k3_sum: np.ndarray,
    seg_code: np.ndarray,
    turn_ratio_sum: np.ndarray,
) -> None:
    """The segment columns of state table ``t`` from each segment's token count and sums of
    ``lr``, ``lt``, ``r`` (``S_i``), K3 and each token's turn ratio (``exp`` of the mean ``r``
    of its turn); ``seg_code`` is each segment's group."""
    rlp = -lr_sum / length  # rollout_log_ppl_i
    tlp = -lt_sum / length
    d = -r_sum / length  # trainer_log_ppl_i - rollout_log_ppl_i, without their cancellation
    red = GroupReducer.from_index(seg_code, len(t))
    t[:, Col.SEGMENTS] = red.counts()
    t[:, Col.SEG_K3_MEAN_SUM] = red.sum(k3_sum / length)
    t[:, Col.RLP_SUM] = red.sum(rlp)
    t[:, Col.TLP_SUM] = red.sum(tlp)
    t[:, Col.RPPL_SUM] = red.sum(np.exp(rlp))
    t[:, Col.TPPL_SUM] = red.sum(np.exp(tlp))
    t[:, Col.D_SUM] = red.sum(d)
    t[:, Col.ABS_D_SUM] = red.sum(np.abs(d))
    t[:, Col.PPL_RATIO_SUM] = red.sum(np.exp(d))
    t[:, Col.CHI2_SEQ_SUM] = red.sum(_chi2_terms(r_sum))
    t[:, Col.RATIO_SEG_SUM] = red.sum(turn_ratio_sum / length)
    cols = (Col.RLP_SUM, Col.TLP_SUM, Col.RLP_M2, Col.TLP_M2, Col.RLPTLP_C)
    _pair_moments(t, red, rlp, tlp, cols)
    extremes = [(Col.RLP_MIN, rlp), (Col.RLP_MAX, rlp), (Col.TLP_MIN, tlp), (Col.TLP_MAX, tlp)]
    _extremes(t, red, extremes)


def expand(
    table: np.ndarray,
    hists: np.ndarray | None,
    present: np.ndarray,
    n_groups: int,
    with_hist: bool,
) -> list[Partial]:
    """Partials for all ``n_groups`` codes; absent groups share one read-only empty partial."""
    table.flags.writeable = False
    if hists is not None:
        hists.flags.writeable = False
    empty = Partial.empty(with_hist)
    empty.state.flags.writeable = False
    if empty.hist is not None:
        empty.hist.flags.writeable = False
    parts = [empty] * n_groups
    for row, code in enumerate(present.tolist()):
        parts[code] = Partial(table[row], None if hists is None else hists[row])
    return parts
