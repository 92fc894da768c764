"""Partials of several groupings of one slice of tokens, with the per-token work done once.

The engine groups the same tokens several ways (per step, per turn kind, per turn, per
probability bin). What is computed per token (``r``, ``expm1``, probabilities...) does not depend
on the grouping, so :func:`token_columns` runs once per slice. Groupings whose keys are constant
along a *turn run* (the contiguous tokens of one sequence in one turn: run, gpu, step, tags, turn
kind, turn) are then reduced in two stages: tokens to turn runs (:func:`turn_runs`, one reduction
per column), and runs to groups (:func:`run_partials`), where sums and extremes merge as they are
and centred moments merge exactly by the parallel formula
``M2 = sum over runs of (M2_run + n_run (mean_run - mean)^2)`` (co-moments alike). Segments (the
tokens of one sequence in one group) are unions of whole runs. Probability bins interleave within
a turn: with a bin grouping, the tokens are stably sorted by bin once and reduced to (run, bin)
cells (:func:`bin_cells`); bin groupings merge the cells (token columns only, no segment columns:
a sequence cut by probability bins is not a unit any metric uses), and the cells merge into the
turn runs that every other grouping uses.

Results equal :func:`mismatchctl.stats.chunk_partials` on the same tokens (up to float rounding),
which the tests check.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from mismatchctl.stats import histogram
from mismatchctl.stats.chunk import (
    TokenColumns,
    _compact,
    expand,
    fill_segment_state,
    fill_token_state,
    token_columns,
)
from mismatchctl.stats.partial import Partial
from mismatchctl.stats.reduce import GroupReducer
from mismatchctl.stats.state import MAX_COLS, MIN_COLS, Col, empty_state

TOKEN_MIN = [c for c in MIN_COLS.tolist() if c <= Col.PT_MAX]
TOKEN_MAX = [c for c in MAX_COLS.tolist() if c <= Col.PT_MAX]
SUMMED = (
    Col.TOKENS,
    Col.K3_SUM,
    Col.R_SUM,
    Col.ABS_R_SUM,
    Col.CHI2_SUM,
    Col.RHO_M1_SUM,
    Col.DP_SUM,
    Col.LOW_PROB,
    Col.PR_SUM,
    Col.PT_SUM,
)


class TurnRuns(NamedTuple):
    """The turn runs of a slice: where each starts, its sequence, its token-column state, and
    the sums of its rollout and trainer logprobs (for the segment columns)."""

    starts: np.ndarray
    lengths: np.ndarray
    seq: np.ndarray
    state: np.ndarray  # (runs, N_FIELDS): token columns filled
    lr_sum: np.ndarray
    lt_sum: np.ndarray


def turn_runs(c: TokenColumns, seq: np.ndarray, turn: np.ndarray) -> TurnRuns:
    n = len(seq)
    new = np.ones(n, dtype=bool)
    new[1:] = (seq[1:] != seq[:-1]) | (turn[1:] != turn[:-1])
    starts = np.flatnonzero(new)
    m = len(starts)
    red = GroupReducer(starts, np.arange(m), n, m)
    state = empty_state(m)
    fill_token_state(state, c, red)
    return TurnRuns(starts, red.lengths, seq[starts], state, red.sum(c.lr), red.sum(c.lt))


def merge_rows(s: np.ndarray, code: np.ndarray, g: int) -> np.ndarray:
    """Token columns of ``g`` groups merged from the rows of state table ``s`` (``code``: each
    row's group): sums add, extremes take min/max, centred moments by the parallel formula."""
    t = empty_state(g)
    with np.errstate(over="ignore", invalid="ignore"):
        for col in SUMMED:
            t[:, col] = np.bincount(code, weights=s[:, col], minlength=g)
        n = s[:, Col.TOKENS]
        _merge_moments(t, s, code, n, (Col.R_SUM,), (Col.R_M2,), None)
        _merge_moments(t, s, code, n, (Col.PR_SUM, Col.PT_SUM), (Col.PR_M2, Col.PT_M2), Col.PRPT_C)
        for col in TOKEN_MIN:
            np.minimum.at(t[:, col], code, s[:, col])
        for col in TOKEN_MAX:
            np.maximum.at(t[:, col], code, s[:, col])
    return t


def run_partials(runs: TurnRuns, run_code: np.ndarray, n_groups: int) -> list[Partial]:
    """One Partial per group code from the runs' states (``run_code``: each run's group)."""
    present, code = _compact(run_code, n_groups)
    t = merge_rows(runs.state, code, len(present))
    with np.errstate(over="ignore", invalid="ignore"):
        _segments(t, runs, code)
    return expand(t, None, present, n_groups, False)


def _merge_moments(
    t: np.ndarray,
    s: np.ndarray,
    code: np.ndarray,
    n: np.ndarray,
    sum_cols: tuple[Col, ...],
    m2_cols: tuple[Col, ...],
    c_col: Col | None,
) -> None:
    """Group centred moments from the runs': within-run moments plus the between-run term."""
    g = len(t)
    n_group = t[:, Col.TOKENS]
    devs = []
    for sum_col, m2_col in zip(sum_cols, m2_cols, strict=True):
        mean_group = t[:, sum_col] / np.where(n_group > 0, n_group, 1.0)
        dev = s[:, sum_col] / np.where(n > 0, n, 1.0) - mean_group[code]
        devs.append(dev)
        t[:, m2_col] = np.bincount(code, weights=s[:, m2_col] + n * dev * dev, minlength=g)
    if c_col is not None:
        terms = s[:, c_col] + n * devs[0] * devs[1]
        t[:, c_col] = np.bincount(code, weights=terms, minlength=g)


def _segments(t: np.ndarray, runs: TurnRuns, code: np.ndarray) -> None:
    """Segment columns: a segment is the runs of one sequence in one group."""
    seq = runs.seq
    m = len(code)
    order = None
    new = np.ones(m, dtype=bool)
    new[1:] = (seq[1:] != seq[:-1]) | (code[1:] != code[:-1])
    seg_starts = np.flatnonzero(new)
    key = seq[seg_starts] * len(t) + code[seg_starts]
    if len(np.unique(key)) != len(seg_starts):  # a sequence came back to a group it left
        order = np.lexsort((code, seq))
        seq, code = seq[order], code[order]
        new[1:] = (seq[1:] != seq[:-1]) | (code[1:] != code[:-1])
        seg_starts = np.flatnonzero(new)

    def per_segment(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values if order is None else values[order], seg_starts)

    s = runs.state
    fill_segment_state(
        t,
        per_segment(s[:, Col.TOKENS]),
        per_segment(runs.lr_sum),
        per_segment(runs.lt_sum),
        per_segment(s[:, Col.R_SUM]),
        per_segment(s[:, Col.K3_SUM]),
        code[seg_starts],
    )


class BinCells(NamedTuple):
    """Tokens grouped by (turn run, probability bin): the cells both kinds of grouping merge."""

    runs: TurnRuns  # the turn runs, their states merged from the cells
    cell_run: np.ndarray  # each cell's turn run
    cell_bin: np.ndarray  # each cell's bin
    cell_state: np.ndarray  # (cells, N_FIELDS): token columns
    cell_lengths: np.ndarray
    r: np.ndarray  # r of every token, in cell order (for the histograms)


def bin_cells(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    turn: np.ndarray,
    bins: np.ndarray,
    nb: int,
    pr: np.ndarray | None = None,
) -> BinCells:
    """One token-level reduction serving every grouping: tokens are stably sorted by bin (so
    each bin keeps the tokens' order and a run's tokens in one bin are contiguous), reduced to
    (run, bin) cells, and the cells merged to runs. ``bins``: each token's bin in ``0..nb-1``;
    ``pr``: ``exp(lr)`` if the caller computed it for the bins."""
    n = len(seq)
    new = np.ones(n, dtype=bool)
    new[1:] = (seq[1:] != seq[:-1]) | (turn[1:] != turn[:-1])
    starts = np.flatnonzero(new)
    run_id = np.cumsum(new) - 1
    small = bins.astype(np.uint16 if nb > 255 else np.uint8)
    order = np.argsort(small, kind="stable")  # a radix sort for small integer keys
    counts = np.bincount(bins, minlength=nb)
    bin_sorted = np.repeat(np.arange(nb), counts)
    rid = run_id[order]
    cell_new = np.ones(n, dtype=bool)
    cell_new[1:] = (rid[1:] != rid[:-1]) | (bin_sorted[1:] != bin_sorted[:-1])
    cell_starts = np.flatnonzero(cell_new)
    c = len(cell_starts)
    cols = token_columns(lr[order], lt[order], None if pr is None else pr[order])
    red = GroupReducer(cell_starts, np.arange(c), n, c)
    cell_state = empty_state(c)
    fill_token_state(cell_state, cols, red)
    cell_run = rid[cell_starts]
    m = len(starts)
    run_state = merge_rows(cell_state, cell_run, m)
    lr_sum = np.bincount(cell_run, weights=red.sum(cols.lr), minlength=m)
    lt_sum = np.bincount(cell_run, weights=red.sum(cols.lt), minlength=m)
    runs = TurnRuns(starts, np.diff(starts, append=n), seq[starts], run_state, lr_sum, lt_sum)
    return BinCells(runs, cell_run, bin_sorted[cell_starts], cell_state, red.lengths, cols.r)


def bin_partials(cells: BinCells, run_code: np.ndarray, n_run_codes: int, nb: int) -> list[Partial]:
    """Partials of the groups (run keys..., bin), codes ``run_code * nb + bin``, with the
    r-histograms; token columns only (see :func:`token_partials`)."""
    cell_code = run_code[cells.cell_run] * nb + cells.cell_bin
    n_groups = n_run_codes * nb
    present, code = _compact(cell_code, n_groups)
    g = len(present)
    t = merge_rows(cells.cell_state, code, g)
    hists = histogram.histogram(cells.r, np.repeat(code, cells.cell_lengths), g)
    return expand(t, hists, present, n_groups, True)
