"""Partials of several groupings of one slice of tokens, with the per-token work done once.

The engine groups the same tokens several ways (per step, per turn kind, per turn, per
probability bin). The tokens are touched once, by :func:`kernels.cell_sums` (compiled, or its
numpy twin for a process's first tokens: ``stats/kernel_choice.py``, the same bits): each
*turn run* (the contiguous tokens of one sequence in one turn) is reduced to one cell per
token code it visits: its probability bin, combined with its KV-position and turn-position bins
when they are asked for (keys that vary inside a turn run). Groupings by those keys merge the
cells (token columns only, no segment columns: a sequence cut by probability or position bins is
not a unit any metric uses); the cells merge into
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

from mismatchctl.stats import hist_lookup, histogram
from mismatchctl.stats.chunk import _compact, expand, fill_segment_state
from mismatchctl.stats.kernel_choice import kernels_for
from mismatchctl.stats.partial import Partial
from mismatchctl.stats.state import Col, empty_state
from mismatchctl.stats.tails import DEFAULT_TAILS, Tails

ONE_BIN = np.array([0.0, np.inf])  # edges of a single probability bin
# no r-histogram lookup: the kernel then bins no token
NO_LOOKUP = hist_lookup.IndexTables(np.zeros(0), np.zeros(0, np.int32), 0, 0)


class TurnRuns(NamedTuple):
    """The turn runs of a slice: where each starts, its sequence, its token-column state, and
    the sums of its rollout and trainer logprobs (for the segment columns)."""

    starts: np.ndarray
    lengths: np.ndarray
    seq: np.ndarray
    state: np.ndarray  # (runs, N_FIELDS): token columns filled
    lr_sum: np.ndarray
    lt_sum: np.ndarray


def turn_runs(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    turn: np.ndarray,
    tails: Tails = DEFAULT_TAILS,
) -> TurnRuns:
    """The turn runs of a slice, without probability bins."""
    return bin_cells(lr, lt, seq, turn, ONE_BIN, with_hist=False, tails=tails).runs


def merge_rows(s: np.ndarray, code: np.ndarray, g: int) -> np.ndarray:
    """Token columns of ``g`` groups merged from the rows of state table ``s`` (``code``: each
    row's group): sums add, extremes take min/max, centred moments by the parallel formula."""
    t = empty_state(g)
    with np.errstate(over="ignore", invalid="ignore"):
        kernels_for(0).merge_token_rows(s, np.ascontiguousarray(code, dtype=np.int64), t)
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
    n = s[:, Col.TOKENS]
    fill_segment_state(
        t,
        per_segment(n),
        per_segment(runs.lr_sum),
        per_segment(runs.lt_sum),
        per_segment(s[:, Col.R_SUM]),
        per_segment(s[:, Col.K3_SUM]),
        code[seg_starts],
        per_segment(n * np.exp(s[:, Col.R_SUM] / n)),  # each turn's tokens x its turn ratio
    )


class BinCells(NamedTuple):
    """Tokens grouped by (turn run, token code): the cells every kind of grouping merges.

    A token code combines the probability bin with the KV-position, turn-position, entropy and
    trainer-probability bins when those were asked for: ``(((bin * n_kv + kv) * n_tp + tp) *
    n_ent + ent) * n_pt + pt`` (``radix = (n_bins, n_kv, n_tp, n_ent, n_pt)``; a component not
    asked for has one value, 0)."""

    runs: TurnRuns  # the turn runs, their states merged from the cells
    cell_run: np.ndarray  # each cell's turn run
    cell_code: np.ndarray  # each cell's token code
    cell_state: np.ndarray  # (cells, TOKEN_FIELDS): token columns
    cell_lengths: np.ndarray
    bucket: np.ndarray | None  # every token's r-histogram bin (None: no histograms wanted)
    tok_cell: np.ndarray  # every token's cell
    radix: tuple[int, ...] = (1, 1, 1, 1, 1)

    @property
    def cell_bin(self) -> np.ndarray:
        """Each cell's probability bin."""
        return self.cell_code // int(np.prod(self.radix[1:]))

    def cell_codes(self, use: tuple[bool, ...]) -> tuple[np.ndarray, int]:
        """Each cell's code over the token components in ``use`` (bin, kv, tp, entropy, trainer
        probability; mixed radix in that order; a shorter ``use`` leaves the last ones out) and
        the number of codes."""
        use = (*use, *([False] * (len(self.radix) - len(use))))
        parts, rest = [], self.cell_code
        for n in reversed(self.radix):
            parts.append(rest % n)
            rest = rest // n
        parts.reverse()
        code = np.zeros(len(self.cell_code), dtype=np.int64)
        size = 1
        for on, part, n in zip(use, parts, self.radix, strict=True):
            if on:
                code = code * n + part
                size *= n
        return code, size


class Positions(NamedTuple):
    """What the KV-position and turn-position bins of a slice need: each token's position in
    its sequence's arrays, each turn run's count added to it (the prompt length of its
    sequence), and the interior edges of both binnings (None: that component is not asked for)."""

    position: np.ndarray | None = None  # int32 per token
    kv_base: np.ndarray | None = None  # int64 per turn run (0 where unknown)
    kv_edges: np.ndarray | None = None  # the edges of the KV bins (the first is 0)
    tp_edges: np.ndarray | None = None  # the edges of the turn-position bins


NO_POSITIONS = Positions()


class TokenBins(NamedTuple):
    """The entropy and trainer-probability bins of a slice's tokens (``codes``: per token,
    ``ent * n_pt + pt``), as the engine computes them (``engines.keys``); a component not asked
    for has one value."""

    codes: np.ndarray | None = None  # int32 per token; None: neither is asked for
    n_entropy: int = 1
    n_trainer: int = 1


NO_TOKEN_BINS = TokenBins()


def run_starts(seq: np.ndarray, turn: np.ndarray) -> np.ndarray:
    """Where each turn run of a slice starts (``seq``/``turn`` as ``bin_cells`` takes them)."""
    return kernels_for(0).run_starts(
        np.ascontiguousarray(seq, dtype=np.int64), np.ascontiguousarray(turn, dtype=np.int32)
    )


def _thresholds(tails: Tails) -> np.ndarray:
    """The kernel's view of the tails: clamp, ln(tau), ln(lower), ln(upper)."""
    return np.array([tails.clamp, tails.log_tau, *tails.log_bounds], dtype=np.float64)


def _inner(edges: np.ndarray | None) -> np.ndarray:
    if edges is None:
        return np.zeros(0, dtype=np.float64)
    return np.ascontiguousarray(np.asarray(edges, dtype=np.float64)[1:])


def bin_cells(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    turn: np.ndarray,
    edges: np.ndarray,
    with_hist: bool = True,
    positions: Positions = NO_POSITIONS,
    starts: np.ndarray | None = None,
    tails: Tails = DEFAULT_TAILS,
    token_bins: TokenBins = NO_TOKEN_BINS,
) -> BinCells:
    """One token-level reduction serving every grouping: the tokens of each turn run reduced to
    one cell per token code they visit (compiled: ``stats/kernels.py``), and the cells merged
    to runs. ``edges``: the bin edges of ``exp(lr)``, as for ``assign_bins``; ``positions``:
    the KV / turn-position binnings, when asked for; ``starts``: the turn runs, when the caller
    has them already (``run_starts``); ``tails``: the thresholds of the tail-robust metrics;
    ``token_bins``: the entropy and trainer-probability bins, when asked for."""
    lr = np.ascontiguousarray(lr, dtype=np.float64)
    lt = np.ascontiguousarray(lt, dtype=np.float64)
    # one signature per compiled function: the store's own dtypes (no copy for store data)
    seq = np.ascontiguousarray(seq, dtype=np.int64)
    turn = np.ascontiguousarray(turn, dtype=np.int32)
    n = len(seq)
    kernels = kernels_for(n)  # the compiled kernels or their numpy twins: the same bits
    if starts is None:
        starts = kernels.run_starts(seq, turn)
    m = len(starts)
    inner = np.ascontiguousarray(np.asarray(edges, dtype=np.float64)[1:-1])
    kv_inner, tp_inner = _inner(positions.kv_edges), _inner(positions.tp_edges)
    position = np.zeros(0, dtype=np.int32)
    kv_base = np.zeros(0, dtype=np.int64)
    if len(kv_inner):
        if positions.position is None or positions.kv_base is None:
            raise ValueError("KV-position bins need each token's position and each run's base")
        position = np.ascontiguousarray(positions.position, dtype=np.int32)
        kv_base = np.ascontiguousarray(positions.kv_base, dtype=np.int64)
        if len(position) != n or len(kv_base) != m:
            raise ValueError(
                f"positions: {len(position)} positions for {n} tokens, {len(kv_base)} bases "
                f"for {m} turn runs"
            )
    extra = np.zeros(0, dtype=np.int32)
    if token_bins.codes is not None:
        extra = np.ascontiguousarray(token_bins.codes, dtype=np.int32)
        if len(extra) != n:
            raise ValueError(f"token bins: {len(extra)} codes for {n} tokens")
    n_extra = token_bins.n_entropy * token_bins.n_trainer
    tables = hist_lookup.index_tables() if with_hist else None
    lookup = tables if tables is not None else NO_LOOKUP
    # exp of both logprobs, expm1 of their difference: one vectorised pass (stats/exp_poly.py),
    # a third of numpy's time; they may differ from the C library's in the last bit (#46), and
    # the tests hold every metric to the float64 reference
    pr, pt, rm1 = kernels.token_exps(lr, lt)
    out = kernels.cell_sums(
        lr,
        lt,
        pr,
        pt,
        rm1,
        starts,
        inner,
        position,
        kv_base,
        kv_inner,
        tp_inner,
        extra,
        n_extra,
        _thresholds(tails),
        *lookup,
    )
    cell_run, cell_code, cell_len, cell_state, lr_sum, lt_sum, r, tok_cell, bucket = out
    run_state = merge_rows(cell_state, cell_run, m)
    runs = TurnRuns(starts, np.diff(starts, append=n), seq[starts], run_state, lr_sum, lt_sum)
    if not with_hist:
        bucket = None
    elif tables is None:  # the bins' bounds failed their check: the numpy code's bins
        bucket = histogram.hist_index(r)
    radix = (
        len(inner) + 1,
        len(kv_inner) + 1,
        len(tp_inner) + 1,
        token_bins.n_entropy if len(extra) else 1,
        token_bins.n_trainer if len(extra) else 1,
    )
    return BinCells(runs, cell_run, cell_code, cell_state, cell_len, bucket, tok_cell, radix)


def token_partials(
    cells: BinCells,
    run_code: np.ndarray,
    n_run_codes: int,
    use: tuple[bool, ...],
    with_hist: bool,
) -> list[Partial]:
    """Partials of the groups (run keys..., token keys...): codes ``run_code * n_tok + tok``
    where ``tok`` is each cell's code over the token components in ``use`` (bin, kv, tp,
    entropy, trainer probability);
    token columns only (no segment columns: a sequence cut by tokens is not a unit any metric
    uses), with the r-histograms when ``with_hist``."""
    tok, n_tok = cells.cell_codes(use)
    cell_group = run_code[cells.cell_run] * n_tok + tok
    n_groups = n_run_codes * n_tok
    present, code = _compact(cell_group, n_groups)
    g = len(present)
    t = merge_rows(cells.cell_state, code, g)
    hists = None
    if with_hist:
        if cells.bucket is None:
            raise ValueError("these cells were made without histograms (with_hist=False)")
        hists = kernels_for(0).histogram_counts(cells.bucket, cells.tok_cell, code, g)
    return expand(t, hists, present, n_groups, with_hist)


def bin_partials(cells: BinCells, run_code: np.ndarray, n_run_codes: int, nb: int) -> list[Partial]:
    """Partials of the groups (run keys..., bin), codes ``run_code * nb + bin``, with the
    r-histograms; token columns only (see :func:`token_partials`)."""
    assert cells.radix[0] == nb
    return token_partials(cells, run_code, n_run_codes, (True, False, False), True)
