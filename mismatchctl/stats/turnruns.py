"""Partials of several groupings of one slice of tokens, with the per-token work done once.

The engine groups the same tokens several ways (per step, per turn kind, per turn, per
probability bin). The tokens are touched once, by the compiled :func:`kernels.cell_sums`: each
*turn run* (the contiguous tokens of one sequence in one turn) is reduced to one cell per
probability bin it visits. Bin groupings merge the cells (token columns only, no segment
columns: a sequence cut by probability bins is not a unit any metric uses); the cells merge into
the turn runs, and every other grouping (run, gpu, step, tags, turn kind, turn: keys constant
along a turn run) merges the runs (:func:`run_partials`). Sums and extremes merge as they are,
centred moments exactly by the parallel formula
``M2 = sum over parts of (M2_part + n_part (mean_part - mean)^2)`` (co-moments alike). Segments
(the tokens of one sequence in one group) are unions of whole runs.

Results equal the one-stage numpy kernel :func:`mismatchctl.stats.chunk_partials` on the same
tokens (up to float rounding), which the tests check.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from mismatchctl.stats import histogram
from mismatchctl.stats.chunk import _compact, expand, fill_segment_state
from mismatchctl.stats.partial import Partial
from mismatchctl.stats.state import Col, empty_state

ONE_BIN = np.array([0.0, np.inf])  # edges of a single probability bin


class TurnRuns(NamedTuple):
    """The turn runs of a slice: where each starts, its sequence, its token-column state, and
    the sums of its rollout and trainer logprobs (for the segment columns)."""

    starts: np.ndarray
    lengths: np.ndarray
    seq: np.ndarray
    state: np.ndarray  # (runs, N_FIELDS): token columns filled
    lr_sum: np.ndarray
    lt_sum: np.ndarray


def turn_runs(lr: np.ndarray, lt: np.ndarray, seq: np.ndarray, turn: np.ndarray) -> TurnRuns:
    """The turn runs of a slice, without probability bins."""
    return bin_cells(lr, lt, seq, turn, ONE_BIN, with_hist=False).runs


def merge_rows(s: np.ndarray, code: np.ndarray, g: int) -> np.ndarray:
    """Token columns of ``g`` groups merged from the rows of state table ``s`` (``code``: each
    row's group): sums add, extremes take min/max, centred moments by the parallel formula."""
    from mismatchctl.stats import kernels

    t = empty_state(g)
    with np.errstate(over="ignore", invalid="ignore"):
        kernels.merge_token_rows(s, np.ascontiguousarray(code, dtype=np.int64), t)
    return t


def run_partials(runs: TurnRuns, run_code: np.ndarray, n_groups: int) -> list[Partial]:
    """One Partial per group code from the runs' states (``run_code``: each run's group)."""
    present, code = _compact(run_code, n_groups)
    t = merge_rows(runs.state, code, len(present))
    with np.errstate(over="ignore", invalid="ignore"):
        _segments(t, runs, code)
    return expand(t, None, present, n_groups, False)


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
    cell_state: np.ndarray  # (cells, TOKEN_FIELDS): token columns
    cell_lengths: np.ndarray
    bucket: np.ndarray | None  # every token's r-histogram bin (None: no histograms wanted)
    tok_cell: np.ndarray  # every token's cell


def bin_cells(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    turn: np.ndarray,
    edges: np.ndarray,
    with_hist: bool = True,
) -> BinCells:
    """One token-level reduction serving every grouping: the tokens of each turn run reduced to
    one cell per probability bin they visit (compiled: ``stats/kernels.py``), and the cells
    merged to runs. ``edges``: the bin edges of ``exp(lr)``, as for ``assign_bins``."""
    lr = np.ascontiguousarray(lr, dtype=np.float64)
    lt = np.ascontiguousarray(lt, dtype=np.float64)
    # one signature per compiled function: the store's own dtypes (no copy for store data)
    seq = np.ascontiguousarray(seq, dtype=np.int64)
    turn = np.ascontiguousarray(turn, dtype=np.int32)
    from mismatchctl.stats import kernels  # numba: imported (~0.5 s) only when tokens are read

    n = len(seq)
    starts = kernels.run_starts(seq, turn)
    inner = np.ascontiguousarray(np.asarray(edges, dtype=np.float64)[1:-1])
    cell_run, cell_bin, cell_len, cell_state, lr_sum, lt_sum, r, tok_cell = kernels.cell_sums(
        lr, lt, np.exp(lr), starts, inner
    )
    m = len(starts)
    run_state = merge_rows(cell_state, cell_run, m)
    runs = TurnRuns(starts, np.diff(starts, append=n), seq[starts], run_state, lr_sum, lt_sum)
    bucket = histogram.hist_index(r) if with_hist else None
    return BinCells(runs, cell_run, cell_bin, cell_state, cell_len, bucket, tok_cell)


def bin_partials(cells: BinCells, run_code: np.ndarray, n_run_codes: int, nb: int) -> list[Partial]:
    """Partials of the groups (run keys..., bin), codes ``run_code * nb + bin``, with the
    r-histograms; token columns only (see :func:`token_partials`)."""
    cell_code = run_code[cells.cell_run] * nb + cells.cell_bin
    n_groups = n_run_codes * nb
    present, code = _compact(cell_code, n_groups)
    g = len(present)
    t = merge_rows(cells.cell_state, code, g)
    from mismatchctl.stats import kernels

    if cells.bucket is None:
        raise ValueError("these cells were made without histograms (with_hist=False)")
    hists = kernels.histogram_counts(cells.bucket, cells.tok_cell, code, g)
    return expand(t, hists, present, n_groups, True)
