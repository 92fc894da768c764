"""Sequences hotter than their peers: a fault of some requests that no column of the dumps names
(one inference replica of eight, rollouts that straddled a weight update, a per-request setting).

Each model token's relative mismatch ``x = log(|r| / |lr|)`` (``r = lt - lr``; ``|lr|`` floored
at ``LR_FLOOR``): numeric noise on the logits moves a token's logprob by about ``(1 - p) dz``,
and ``1 - p`` is about ``|lr|`` where most tokens are, so ``x`` is comparable across
probabilities; tokens with ``r = 0`` exactly are left out (counted). A sequence's ``z`` sums its
tokens' deviations from the mean ``x`` of their *cell* (turn kind x the report's probability
bin, over its run), over the square root of the cells' variances: under tokens
alike within a cell, ``z`` is about standard normal. ``z`` is then centered on the median of its
run's step (a hot step, a growth, a gpu half of the run are other checks' and move a whole step,
or both tails alike). A fault of some sequences makes many ``z`` above ``Z_TAIL`` and few below
``-Z_TAIL``; a run whose sequences just differ (contexts, lengths) has both tails alike.

The state is per sequence and per cell (long form), kept per part and joined once the whole
selection is read (``HotSequenceParts``); the test runs then (``summarize``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from mismatchctl.stats import per_token

LR_FLOOR = 1e-6
"""|lr| below this is taken as this (p within 1e-6 of 1): x stays finite."""

CELLS = 1 << 16  # cell codes (turn kind x probability bin) stay below this
MIN_TOKENS = 16
"""Tokens with r != 0 a sequence needs to be tested: fewer give a z driven by one token."""

TAIL_RATIO = 0.05
"""A token's ``r`` above this share of its ``|lr|`` (``x > log TAIL_RATIO``) is in the positive
tail of the healthy noise: the calibration corpus' healthy and improved runs put 0-2.7% of their
tokens there (10% at T = 0.6), and a truncation renormalised on the rollout side (top-p, top-k,
min-p), which only lowers ``r``, puts none there that the noise does not (its runs 0-1.3%). The
tokens with ``r`` above it per (sequence, cell) are the sign test's counts where a truncation
cannot reach (``stats.sign_coherence.tail_coherence``)."""

COLUMNS = 14
"""The columns of ``HotSequenceState.sums``."""

N_ALL, NONZERO, K3_SUM, POSITIVE, TAIL = 0, 1, 4, 5, 6
"""Its columns of the tokens, those with ``r != 0``, their K3, those with ``r > 0`` and those
above ``TAIL_RATIO`` (the sign tests' counts, ``stats.sign_coherence``)."""

LINE = slice(8, 14)
"""Its columns of the line: count, sums of lr, lr^2, r, r^2 and lr r."""

Z_TAIL = 3.0
"""A sequence is hot (cold) at z above (below) this: 0.13% of each tail under the null."""


@dataclass
class HotSequenceState:
    """Per sequence: its run (index into ``runs``), step and id; per (sequence, cell) with
    tokens: the sequence's row, the cell, the tokens (``n_all``), those with r != 0 (``n``), the
    sums of x and x^2 over them, the sum of K3 over all, the tokens with r > 0, those above the
    healthy noise's positive tail (``TAIL_RATIO``) and their K3, and the sums of the line of the
    trainer's logprobs on the rollout's over the tokens with finite logprobs (``LINE``).
    ``gpu``: each sequence's gpu label (None where the dumps name none): the tests on the
    sequences outside one gpu's (``analysis/diagnose/causes/outside.py``)."""

    runs: list[str] = field(default_factory=list)
    run: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    step: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    seq: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    row: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cell: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # n_all, n, x, x^2, K3, the tokens with r > 0 and with r > TAIL_RATIO |lr|
    # (``stats.sign_coherence``), and those tokens' K3 (``stats.tail_excess``); the line's
    # count and sums of lr, lr^2, r, r^2, lr r (``LINE``: ``stats.line_slope.cell_line``)
    sums: np.ndarray = field(default_factory=lambda: np.zeros((0, COLUMNS)))
    gpu: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.gpu is None or len(self.gpu) != len(self.step):  # built without gpus: none known
            self.gpu = np.full(len(self.step), None, object)


@dataclass
class HotSequenceParts:
    """The states of the parts read so far, joined once at the end (:meth:`joined`): a merge
    is a list concatenation, not a copy of every row read before (quadratic over many parts)."""

    parts: list[HotSequenceState] = field(default_factory=list)
    _runs: dict[str, HotSequenceState] | None = field(default=None, repr=False, compare=False)

    def merge(self, other: HotSequenceParts) -> HotSequenceParts:
        return HotSequenceParts([*self.parts, *other.parts])

    def runs(self) -> dict[str, HotSequenceState]:
        """Each run's state (:func:`by_run` of :meth:`joined`), in :func:`canonical` order;
        computed once for the checks that read it."""
        if self._runs is None:
            self._runs = {run: canonical(st) for run, st in by_run(self.joined()).items()}
        return self._runs

    def joined(self) -> HotSequenceState:
        """One state of every part (runs in name order)."""
        runs = sorted({name for part in self.parts for name in part.runs})
        where = {name: i for i, name in enumerate(runs)}
        parts = self.parts or [HotSequenceState()]
        offsets = np.cumsum([0, *(len(p.step) for p in parts)])[:-1]

        def codes(p: HotSequenceState) -> np.ndarray:
            table = np.array([where[name] for name in p.runs], np.int64)
            return table[p.run] if len(p.run) else p.run

        return HotSequenceState(
            runs,
            np.concatenate([codes(p) for p in parts]),
            np.concatenate([p.step for p in parts]),
            np.concatenate([p.seq for p in parts]),
            np.concatenate([p.row + o for p, o in zip(parts, offsets, strict=True)]),
            np.concatenate([p.cell for p in parts]),
            np.concatenate([p.sums for p in parts]),
            np.concatenate([p.gpu for p in parts]),
        )


def hot_sequence_state(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    turn: np.ndarray,
    step: np.ndarray,
    bins: np.ndarray,
    n_bins: int,
    label: str = "",
    gpu: np.ndarray | None = None,
    k3: np.ndarray | None = None,
    gpu_codes: tuple[np.ndarray, np.ndarray] | None = None,
    r: np.ndarray | None = None,
    starts: np.ndarray | None = None,
) -> HotSequenceParts:
    """The per-sequence cell sums of one chunk of whole sequences (a sequence's tokens
    contiguous) of run ``label``; ``bins``: each token's probability bin (``0..n_bins-1``);
    ``gpu``: each token's gpu label (None: not known); ``gpu_codes``: instead, each token's gpu
    code and the codes' labels (an object array: only each sequence's label is looked up, not
    a label per token); ``k3`` and ``r``: each token's ``expm1(r) - r`` and ``r = lt - lr`` when
    the caller has them, and ``starts`` (each sequence's first row). The sums in one compiled walk (``diagnose_kernels.hot_cell_sums``:
    ``bincount``'s additions, in its order)."""
    from mismatchctl.stats import diagnose_kernels

    n = len(lr)
    if n == 0:
        return HotSequenceParts()
    if starts is None:
        starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    r = lt - lr if r is None else r
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        k3 = per_token.k3(r) if k3 is None else k3
        x = _relative(r, lr)  # -inf where r == 0: the walk reads no x there
    width = 2 * n_bins
    dense = np.zeros((len(starts) * width, COLUMNS))
    diagnose_kernels.hot_cell_sums(
        starts, turn, np.ascontiguousarray(bins, np.int64), n_bins, lr, r, x, k3,
        math.log(TAIL_RATIO), dense,
    )  # fmt: skip
    keys = np.flatnonzero(dense[:, 0])
    sums = dense[keys]
    return HotSequenceParts(
        [
            HotSequenceState(
                [label],
                np.zeros(len(starts), np.int64),
                step[starts].astype(np.int64),
                seq[starts].astype(np.int64),
                keys // width,
                keys % width,
                sums,
                _sequence_gpus(gpu, gpu_codes, starts),
            )
        ]
    )


def _relative(r: np.ndarray, lr: np.ndarray) -> np.ndarray:
    """Each token's ``x = log(|r| / max(-lr, LR_FLOOR))``, in two buffers: numpy's operations
    of the expression, each into a buffer of the slice's length, not a new one each."""
    x = np.abs(r)
    floor = np.negative(lr)
    np.maximum(floor, LR_FLOOR, out=floor)
    np.divide(x, floor, out=x)
    return np.log(x, out=x)


@dataclass
class HotSequences:
    """The test's result: sequences tested, hot and cold; the hot ones' tokens, K3 mass and
    rate against the other sequences' at the same cells (turn kind, probability); a few of the
    hottest as (run, step, seq, z)."""

    tested: int
    hot: int
    cold: int
    hot_tokens: int
    tokens: int
    hot_mass_share: float
    rate_ratio: float
    examples: list[tuple[str, int, int, float]]


def canonical(state: HotSequenceState) -> HotSequenceState:
    """The state with its sequences in (run, seq) order and their cells in (sequence, cell)
    order: the sums that follow add in one order whatever order the parts were merged in."""
    if _sorted_by(state.run, state.seq) and _sorted_by(state.row, state.cell):
        return state  # in that order already: neither sorts' arrays nor a copy of its rows
    order = np.lexsort((state.seq, state.run))
    new_row = np.empty_like(order)
    new_row[order] = np.arange(len(order))
    row = new_row[state.row]
    cells = np.lexsort((state.cell, row))
    return HotSequenceState(
        list(state.runs),
        state.run[order],
        state.step[order],
        state.seq[order],
        row[cells],
        state.cell[cells],
        state.sums[cells],
        state.gpu[order],
    )


def _sorted_by(major: np.ndarray, minor: np.ndarray) -> bool:
    """Whether the pairs ``(major, minor)`` are in ascending order (as a stable lexsort leaves
    them)."""
    if len(major) < 2:
        return True
    up, same = major[1:] > major[:-1], major[1:] == major[:-1]
    return bool(np.all(up | (same & (minor[1:] >= minor[:-1]))))


def sequence_z(state: HotSequenceState) -> tuple[np.ndarray, np.ndarray]:
    """Each sequence's centered z and whether it was tested (``MIN_TOKENS``); ``state`` in
    :func:`canonical` order for sums that do not depend on the merge order."""
    rows = len(state.step)
    n, sx, sxx = state.sums[:, NONZERO], state.sums[:, 2], state.sums[:, 3]
    group = state.run[state.row] * CELLS + state.cell  # (run, cell)
    groups, g = np.unique(group, return_inverse=True)
    gn = np.bincount(g, n, len(groups))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(gn > 0, np.bincount(g, sx, len(groups)) / gn, 0.0)
        var = np.maximum(np.where(gn > 0, np.bincount(g, sxx, len(groups)) / gn, 0.0) - mean**2, 0)
    num = np.bincount(state.row, sx - n * mean[g], rows)
    den = np.bincount(state.row, n * var[g], rows)
    tokens = np.bincount(state.row, n, rows)
    tested = (tokens >= MIN_TOKENS) & (den > 0)
    z = np.zeros(rows)
    z[tested] = num[tested] / np.sqrt(den[tested])
    batch = state.run * (1 << 40) + state.step
    for b in np.unique(batch[tested]):
        inside = tested & (batch == b)
        z[inside] -= np.median(z[inside])
    return z, tested


def by_run(state: HotSequenceState) -> dict[str, HotSequenceState]:
    """The state of each run alone (a selection of several runs is judged run by run: a fault
    of some requests in one run is a small share of them all)."""
    out = {}
    for code, name in enumerate(state.runs):
        keep = state.run == code
        if keep.all():  # one run: its rows as they are, not a copy of them
            run = np.zeros(len(keep), np.int64)
            return {name: replace(state, runs=[name], run=run)}
        if keep.any():
            out[name] = keep_sequences(state, keep, [name])
    return out


def keep_sequences(
    state: HotSequenceState, keep: np.ndarray, runs: list[str] | None = None
) -> HotSequenceState:
    """The sequences of ``keep`` (a mask over them) and their cells; ``runs``: the one run they
    all belong to (their run codes become 0), None to keep the runs as they are."""
    new_row = np.cumsum(keep) - 1
    cells = keep[state.row]
    run = state.run[keep] if runs is None else np.zeros(int(keep.sum()), np.int64)
    return HotSequenceState(
        list(state.runs) if runs is None else runs, run, state.step[keep], state.seq[keep],
        new_row[state.row[cells]], state.cell[cells], state.sums[cells], state.gpu[keep],
    )  # fmt: skip


def line_rows(state: HotSequenceState) -> np.ndarray:
    """Per sequence (its row), the line's sums over its cells (``LINE``: count, lr, lr^2, r,
    r^2, lr r), for the line of any set of sequences and cells (``stats.line_slope``); in
    :func:`canonical` order for sums that do not depend on the merge order."""
    state = canonical(state)
    rows = len(state.step)
    cols = state.sums[:, LINE]
    return np.stack([np.bincount(state.row, cols[:, c], rows) for c in range(cols.shape[1])], 1)


def sampled_nll(*states: HotSequenceState) -> float | None:
    """The sampled tokens' mean negative rollout logprob over these states' tokens with finite
    logprobs (``LINE``'s count and sum of lr; exact sums: the same whatever the merge order),
    or None without any."""
    n = math.fsum(math.fsum(st.sums[:, LINE.start]) for st in states)
    lr = math.fsum(math.fsum(st.sums[:, LINE.start + 1]) for st in states)
    return -lr / n if n > 0 else None


def sampled_spread(*states: HotSequenceState) -> float | None:
    """The standard deviation of the sampled tokens' rollout logprobs over these states' tokens
    with finite logprobs (``LINE``'s count and sums of lr and lr^2; exact sums), or None with
    fewer than two such tokens."""
    n = math.fsum(math.fsum(st.sums[:, LINE.start]) for st in states)
    lr = math.fsum(math.fsum(st.sums[:, LINE.start + 1]) for st in states)
    lr2 = math.fsum(math.fsum(st.sums[:, LINE.start + 2]) for st in states)
    if n < 2:
        return None
    return math.sqrt(max(lr2 - lr * lr / n, 0.0) / (n - 1))


def summarize(state: HotSequenceState, examples: int = 5) -> HotSequences:
    state = canonical(state)
    z, tested = sequence_z(state)
    hot, cold = tested & (z > Z_TAIL), tested & (z < -Z_TAIL)
    n_all, k3 = state.sums[:, N_ALL], state.sums[:, K3_SUM]
    is_hot = hot[state.row]
    group = state.run[state.row] * CELLS + state.cell
    groups, g = np.unique(group, return_inverse=True)
    rest_n = np.bincount(g, np.where(is_hot, 0.0, n_all), len(groups))
    rest_a = np.bincount(g, np.where(is_hot, 0.0, k3), len(groups))
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(rest_n > 0, rest_a / rest_n, np.nan)
    expected = float(np.nansum(np.where(is_hot, n_all * rate[g], 0.0)))
    observed = float(k3[is_hot].sum())
    total = float(k3.sum())
    order = np.argsort(-np.where(hot, z, -np.inf))[: min(examples, int(hot.sum()))]
    return HotSequences(
        int(tested.sum()),
        int(hot.sum()),
        int(cold.sum()),
        int(n_all[is_hot].sum()),
        int(n_all.sum()),
        observed / total if total > 0 else math.nan,
        observed / expected if expected > 0 else math.nan,
        [
            (state.runs[state.run[i]], int(state.step[i]), int(state.seq[i]), float(z[i]))
            for i in order
        ],
    )


__all__ = ["HotSequenceState", "HotSequences", "hot_sequence_state", "sequence_z", "summarize"]


def _sequence_gpus(
    gpu: np.ndarray | None, gpu_codes: tuple[np.ndarray, np.ndarray] | None, starts: np.ndarray
) -> np.ndarray | None:
    """Each sequence's gpu label (its first token's), None when not known."""
    if gpu_codes is not None:
        codes, labels = gpu_codes
        return labels[np.asarray(codes)[starts]]
    return None if gpu is None else np.asarray(gpu, object)[starts]
