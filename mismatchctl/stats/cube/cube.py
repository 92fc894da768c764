"""The K3 cube: a mergeable state holding, for every conjunction of up to three dimensions, the
table of K3 mass over the product of their values (layout: ``stats/cube_spec.py``).

Per cell, ten float64 fields (``Field``): the tokens ``n`` and the K3 sum ``A`` of the cell, and,
over the sequences with tokens in the cell (``y_i`` = the sequence's K3 sum in the cell, ``x_i``
its tokens there, ``Y_i``/``X_i`` the sequence's K3 sum and tokens overall), ``sum y_i^2``,
``sum x_i^2``, ``sum x_i y_i``, their count, and the cross moments ``sum Y_i y_i``,
``sum X_i y_i``, ``sum Y_i x_i``, ``sum X_i x_i``: the clustered second moments of a sandwich
(cluster-robust) variance of the cell's rate ``A / n`` and of its contrast with the rest of the
selection (the cell and its rest share sequences), sequences being the clusters. K3 per token is ``expm1(r) - r`` with ``r = lt - lr`` (METRICS.md; never
clamped: an overflow is ``inf``).

Merge is addition (associative and commutative up to float rounding; the empty cube is its
identity), provided each sequence's tokens reach one ``add`` call whole (the engine's slices
hold whole sequences): a sequence split across calls counts as two clusters.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from mismatchctl.stats.cube.cells import SequenceCells
from mismatchctl.stats.cube.spec import CubeSpec, Dim, Table

MAX_COMBOS = 1 << 24  # token-code combinations a sequence buffer may address (128 MB of buffer)


class Field(IntEnum):
    """Columns of a cube cell."""

    TOKENS = 0  # n: tokens in the cell
    K3 = 1  # A: sum of K3 over them
    YY = 2  # sum over sequences of y_i^2 (y_i: the sequence's K3 sum in the cell)
    XX = 3  # sum over sequences of x_i^2 (x_i: the sequence's tokens in the cell)
    XY = 4  # sum over sequences of x_i y_i
    SEQS = 5  # sequences with tokens in the cell
    CYY = 6  # sum over sequences of Y_i y_i (Y_i: the sequence's K3 sum overall)
    CXY = 7  # sum over sequences of X_i y_i (X_i: the sequence's tokens overall)
    CYX = 8  # sum over sequences of Y_i x_i
    CXX = 9  # sum over sequences of X_i x_i


N_FIELDS = len(Field)


class Cube:
    """The cube state of one selection of tokens: ``state`` is (``spec.n_cells``, 10) float64."""

    __slots__ = ("spec", "state")

    def __init__(self, spec: CubeSpec, state: np.ndarray | None = None) -> None:
        self.spec = spec
        if state is None:
            state = np.zeros((spec.n_cells, N_FIELDS), dtype=np.float64)
        if state.shape != (spec.n_cells, N_FIELDS):
            raise ValueError(
                f"cube state must have shape {(spec.n_cells, N_FIELDS)} (found {state.shape})"
            )
        self.state = state

    @classmethod
    def from_tokens(
        cls,
        spec: CubeSpec,
        lr: np.ndarray,
        lt: np.ndarray,
        seq: np.ndarray,
        token_codes: np.ndarray,
        seq_codes: np.ndarray,
    ) -> Cube:
        """A new cube holding these tokens (see :meth:`add`)."""
        cube = cls(spec)
        cube.add(lr, lt, seq, token_codes, seq_codes)
        return cube

    def add(
        self,
        lr: np.ndarray,
        lt: np.ndarray,
        seq: np.ndarray,
        token_codes: np.ndarray,
        seq_codes: np.ndarray,
        seq_keys: np.ndarray | None = None,
        keep: np.ndarray | None = None,
        bit: int = 1,
        k3: np.ndarray | None = None,
    ) -> SequenceCells | None:
        """Add whole sequences of model tokens, in place.

        ``lr``/``lt``: rollout/trainer logprobs (float64, finite); ``seq``: each token's row of
        ``seq_codes`` (a sequence's tokens contiguous and complete); ``token_codes``: tokens x
        token dimensions (int16/int32 codes, in ``spec.token_dims`` order); ``seq_codes``:
        sequences x sequence dimensions (ints, in ``spec.seq_dims`` order). With ``seq_keys``
        (each row of ``seq_codes``'s key): also the sequences' cells, in the order of their
        tokens (``stats/cube_cells.py``: what the findings' bootstrap needs of them). With
        ``keep`` (uint8 per token): only the tokens whose ``keep`` has ``bit`` set, as if the
        others were not given (their logprobs need not be finite; a sequence without a kept
        token is no cluster): several cubes of one slice read it without filtered copies.
        ``k3``: each token's ``cube_kernels.token_k3`` when the caller has it (several cubes
        of one slice compute it once).
        """
        from mismatchctl.stats.cube import kernels as cube_kernels  # numba: compiled on first use

        def dense(*args: object) -> None:
            counts = np.zeros(1, np.int64)
            lr, lt, starts, rows, order, *rest = args
            cube_kernels.cube_accumulate(
                self.state, lr, lt, starts, rows, order, 0, *rest, _NO_SLOTS, _NO_CELLS, counts
            )

        return add_tokens(
            self.spec, dense, lr, lt, seq, token_codes, seq_codes, seq_keys, keep, bit, k3
        )

    def add_checked(
        self,
        tokens: CheckedTokens,
        codes: CheckedCodes,
        seq_codes: np.ndarray,
        bit: int = 1,
        k3: np.ndarray | None = None,
    ) -> None:
        """:meth:`add` of tokens and codes checked once for several cubes of one slice
        (:func:`check_tokens`, :func:`check_codes`): the same sums, without a check pass over
        the tokens per cube. ``bit`` must be among the bits the tokens were checked for."""
        from mismatchctl.stats.cube import kernels as cube_kernels  # numba: compiled on first use

        if codes.dims != self.spec.token_dims or len(codes.codes) != len(tokens.lr):
            raise ValueError(
                f"token codes checked for dimensions {[d.name for d in codes.dims]} and "
                f"{len(codes.codes)} tokens; this cube's are "
                f"{[d.name for d in self.spec.token_dims]} and {len(tokens.lr)} tokens"
            )
        if tokens.masked and bit & ~tokens.bits:
            raise ValueError(f"bit {bit} is not among the bits checked ({tokens.bits})")
        seqc = _codes(seq_codes, "seq_codes", len(self.spec.seq_dims))
        if len(seqc) != tokens.sequences:
            raise ValueError(
                f"seq_codes must have the {tokens.sequences} rows the tokens were checked "
                f"against (found {len(seqc)})"
            )
        _check_range(seqc, self.spec.seq_dims, "seq_codes")
        given = _k3(k3, tokens.lr)

        def dense(*args: object) -> None:
            counts = np.zeros(1, np.int64)
            lr, lt, starts, rows, order, *rest = args
            cube_kernels.cube_accumulate(
                self.state, lr, lt, starts, rows, order, 0, *rest, _NO_SLOTS, _NO_CELLS, counts
            )

        if len(tokens.lr):
            _accumulate(
                self.spec, dense, tokens.lr, tokens.lt, codes.codes, seqc, tokens.keep, bit,
                given, tokens.starts, tokens.rows, None,
            )  # fmt: skip

    def merge(self, other: Cube) -> Cube:
        """A new cube holding both (same spec)."""
        if other.spec != self.spec:
            raise ValueError("cubes of different dimensions cannot be merged")
        return Cube(self.spec, self.state + other.state)

    def merge_into(self, other: Cube) -> Cube:
        """This cube with ``other`` added in place when its state is writable (an engine's
        running total: no new 8 MB state per slice), else a new cube (a state read from Ray's
        object store is read-only)."""
        if other.spec != self.spec:
            raise ValueError("cubes of different dimensions cannot be merged")
        if not self.state.flags.writeable:
            return self.merge(other)
        self.state += other.state
        return self

    def table(self, dims: Sequence[str | int], exact: bool = False) -> np.ndarray:
        """View of one table as an array of shape (*table shape, 10), dimensions in ascending
        index order; ``exact``: the exact 1-d table of a blocked dimension."""
        t = self.table_info(dims, exact)
        return self.state[t.offset : t.offset + t.cells].reshape(*t.shape, N_FIELDS)

    def table_info(self, dims: Sequence[str | int], exact: bool = False) -> Table:
        idx = [self.spec.index(d) for d in dims]
        i = self.spec.table_index(idx, exact)
        if i is None:
            names = ", ".join(self.spec.dims[d].name for d in idx)
            raise KeyError(f"the cube has no table of ({names})")
        return self.spec.tables[i]

    @property
    def tokens(self) -> int:
        return int(self.state[0, Field.TOKENS])

    @property
    def sequences(self) -> int:
        return int(self.state[0, Field.SEQS])

    @property
    def k3_sum(self) -> float:
        return float(self.state[0, Field.K3])

    @property
    def nbytes(self) -> int:
        return int(self.state.nbytes)

    def __repr__(self) -> str:
        return f"Cube(tokens={self.tokens}, tables={len(self.spec.tables)}, MB={self.nbytes / 1e6:.1f})"


_NO_SLOTS = np.zeros(0, np.int32)  # a dense state: every cell is its own row
_NO_CELLS = np.zeros(0, np.int64)
_NO_KEEP = np.zeros(0, np.uint8)  # no mask: every token
_NO_K3 = np.zeros(0, np.float64)  # the kernel computes each token's K3
_NO_DIMS = CubeSpec((), ())  # the token checks without codes (check_tokens)


def add_tokens(
    spec: CubeSpec,
    accumulate: Callable[..., None],
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    token_codes: np.ndarray,
    seq_codes: np.ndarray,
    seq_keys: np.ndarray | None,
    keep: np.ndarray | None = None,
    bit: int = 1,
    k3: np.ndarray | None = None,
) -> SequenceCells | None:
    """:meth:`Cube.add` of a state behind ``accumulate`` (the arguments of
    ``cube_kernels.cube_accumulate`` after the state, up to the sequences' cells): the checks,
    the sequences' runs, and the sequences' cells when ``seq_keys`` is given."""
    mask = _NO_KEEP if keep is None else np.ascontiguousarray(keep, dtype=np.uint8)
    given = _k3(k3, lr)
    lr, lt, seq, tok, seqc = _checked(spec, lr, lt, seq, token_codes, seq_codes, mask, bit)
    if seq_keys is not None and np.shape(seq_keys) != (len(seqc),):
        raise ValueError(
            f"seq_keys must hold one key per row of seq_codes ({len(seqc)}; found "
            f"{np.shape(seq_keys)})"
        )
    if len(lr) == 0:
        return None if seq_keys is None else _no_cells(seqc)
    starts, rows = sequence_runs(seq)
    return _accumulate(
        spec, accumulate, lr, lt, tok, seqc, mask, bit, given, starts, rows, seq_keys
    )


def _k3(k3: np.ndarray | None, lr: np.ndarray) -> np.ndarray:
    """The caller's K3 per token as the kernels take it (empty: they compute it)."""
    given = _NO_K3 if k3 is None else np.ascontiguousarray(k3, dtype=np.float64)
    if len(given) and given.shape != np.shape(lr):
        raise ValueError(f"k3 must have one entry per token (found {given.shape})")
    return given


def _accumulate(
    spec: CubeSpec,
    accumulate: Callable[..., None],
    lr: np.ndarray,
    lt: np.ndarray,
    tok: np.ndarray,
    seqc: np.ndarray,
    mask: np.ndarray,
    bit: int,
    given: np.ndarray,
    starts: np.ndarray,
    rows: np.ndarray,
    seq_keys: np.ndarray | None,
) -> SequenceCells | None:
    """The checked tokens (at least one) of sequences ``rows`` starting at ``starts`` into the
    state behind ``accumulate``; the sequences' cells when ``seq_keys`` is given."""
    layout = kernel_layout(spec)
    longest = int(np.diff(starts).max())
    keep = seq_keys is not None
    count = np.zeros(len(rows) if keep else 0, np.int64)
    combo = np.empty(len(lr) if keep else 0, np.int32)
    ntok = np.empty(len(combo), np.int32)
    cell_k3 = np.empty(len(combo), np.float64)
    order = group_order(rows, seqc)
    with np.errstate(over="ignore", invalid="ignore"):
        accumulate(
            lr, lt, starts, rows, order, tok, seqc, mask, bit, given, layout,
            min(longest, layout[2]), count, combo, ntok, cell_k3,
        )  # fmt: skip
    if seq_keys is None:
        return None
    ptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(count, out=ptr[1:])
    # each sequence's cells were written from its first token: gathered in sequence order
    at = np.repeat(starts[:-1] - ptr[:-1], count) + np.arange(int(ptr[-1]))
    return SequenceCells(
        np.asarray(seq_keys, np.uint64)[rows], seqc[rows].astype(np.int32), ptr,
        combo[at], ntok[at], cell_k3[at],
    )  # fmt: skip


@dataclass(frozen=True)
class CheckedTokens:
    """One slice's tokens checked once for the cubes that read it (:meth:`Cube.add_checked`):
    both logprobs finite at every token (every one whose ``keep`` has one of ``bits``, when
    ``masked``), ``seq`` indexing ``sequences`` rows, each sequence's tokens contiguous (their
    runs: ``starts``, ``rows``, as :func:`sequence_runs` gives them)."""

    lr: np.ndarray
    lt: np.ndarray
    keep: np.ndarray
    bits: int
    sequences: int
    starts: np.ndarray
    rows: np.ndarray

    @property
    def masked(self) -> bool:
        return len(self.keep) > 0


@dataclass(frozen=True)
class CheckedCodes:
    """Token codes checked once against cube dimensions ``dims``, for the cubes of those
    token dimensions that read one slice."""

    dims: tuple[Dim, ...]
    codes: np.ndarray


def check_tokens(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    sequences: int,
    keep: np.ndarray | None = None,
    bits: int = 0xFF,
) -> CheckedTokens:
    """:meth:`Cube.add`'s checks of the logprobs, ``seq`` and ``keep``, in one pass for every
    cube of a slice (its cubes' ``bit`` among ``bits``); the same errors."""
    mask = _NO_KEEP if keep is None else np.ascontiguousarray(keep, dtype=np.uint8)
    no_codes = np.zeros((len(seq), 0), np.int32)
    lr, lt, seq, _, _ = _checked(
        _NO_DIMS, lr, lt, seq, no_codes, np.zeros((sequences, 0), np.int32), mask, bits
    )
    if not len(lr):
        empty = np.zeros(0, np.int64)
        return CheckedTokens(lr, lt, mask, bits, sequences, np.zeros(1, np.int64), empty)
    return CheckedTokens(lr, lt, mask, bits, sequences, *sequence_runs(seq))


def check_codes(spec: CubeSpec, token_codes: np.ndarray) -> CheckedCodes:
    """:meth:`Cube.add`'s checks of ``token_codes`` against ``spec``'s token dimensions, once
    for the cubes of that spec that read one slice; the same errors."""
    codes = _codes(token_codes, "token_codes", len(spec.token_dims))
    _check_range(codes, spec.token_dims, "token_codes")
    return CheckedCodes(spec.token_dims, codes)


def merge_all(cubes: Iterable[Cube], spec: CubeSpec) -> Cube:
    """The merge of any number of cubes of ``spec`` (the empty cube when there are none)."""
    total = Cube(spec)
    for cube in cubes:
        if cube.spec != spec:
            raise ValueError("cubes of different dimensions cannot be merged")
        total.state += cube.state
    return total


def _no_cells(seqc: np.ndarray) -> SequenceCells:
    empty = np.zeros(0, np.int32)
    return SequenceCells(
        np.zeros(0, np.uint64), np.zeros((0, seqc.shape[1]), np.int32), np.zeros(1, np.int64),
        empty, empty, np.zeros(0, np.float64),
    )  # fmt: skip


def sequence_runs(seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First token of each sequence (plus the end) and each sequence's value of ``seq``; a
    ValueError when a sequence's tokens are not contiguous."""
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    rows = seq[starts]
    if len(np.unique(rows)) != len(rows):
        values, counts = np.unique(rows, return_counts=True)
        bad = int(values[counts > 1][0])
        raise ValueError(
            f"the tokens of a sequence must be contiguous (sequence row {bad} appears in "
            f"{int(counts[counts > 1][0])} separate runs)"
        )
    return np.r_[starts, len(seq)].astype(np.int64), rows.astype(np.int64)


def group_order(rows: np.ndarray, seqc: np.ndarray) -> np.ndarray:
    """The sequences (their ``rows`` of ``seqc``) ordered so that those with the same codes of
    every sequence dimension come one after the other (in their own order within a group)."""
    if len(rows) < 2 or seqc.shape[1] == 0:
        return np.arange(len(rows), dtype=np.int64)
    codes = seqc[rows]
    return np.lexsort(codes.T[::-1]).astype(np.int64)


def _checked(
    spec: CubeSpec,
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    token_codes: np.ndarray,
    seq_codes: np.ndarray,
    keep: np.ndarray = _NO_KEEP,
    bit: int = 1,
) -> tuple[np.ndarray, ...]:
    lr = np.ascontiguousarray(lr, dtype=np.float64)
    lt = np.ascontiguousarray(lt, dtype=np.float64)
    seq = np.ascontiguousarray(seq, dtype=np.int64)
    tok = _codes(token_codes, "token_codes", len(spec.token_dims))
    seqc = _codes(seq_codes, "seq_codes", len(spec.seq_dims))
    n = len(lr)
    if lr.ndim != 1 or lt.shape != (n,) or seq.shape != (n,) or len(tok) != n:
        shapes = ", ".join(str(a.shape) for a in (lr, lt, seq, tok))
        raise ValueError(
            f"lr, lt, seq and token_codes must have one row per token (found {shapes})"
        )
    if len(keep) and keep.shape != (n,):
        raise ValueError(f"keep must have one entry per token ({n}; found {keep.shape})")
    if n:
        _check_tokens(spec, lr, lt, seq, tok, len(seqc), keep, bit)
    _check_range(seqc, spec.seq_dims, "seq_codes")
    return lr, lt, seq, tok, seqc


def _check_tokens(
    spec: CubeSpec,
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    tok: np.ndarray,
    rows: int,
    keep: np.ndarray,
    bit: int,
) -> None:
    """The per-token checks (finite logprobs, every kept one with a mask; ``seq`` within the
    ``rows`` of the sequence codes; token codes within their dimensions) from one compiled pass
    (``cube_kernels.token_checks``: it was four passes of numpy and one compiled)."""
    from mismatchctl.stats.cube import kernels as cube_kernels

    lo = np.zeros(tok.shape[1], np.int64)
    hi = np.zeros(tok.shape[1], np.int64)
    finite, seq_lo, seq_hi = cube_kernels.token_checks(lr, lt, seq, tok, keep, bit, lo, hi)
    if not finite:
        raise ValueError("logprobs must be finite (found NaN or infinity)")
    if seq_lo < 0 or seq_hi >= rows:
        raise ValueError(
            f"seq must index the rows of seq_codes 0..{rows - 1} (found {seq_lo}..{seq_hi})"
        )
    for k, d in enumerate(spec.token_dims):
        if lo[k] < 0 or hi[k] >= d.size:
            raise ValueError(
                f"token_codes: codes of dimension {d.name!r} must lie in 0..{d.size - 1} "
                f"(found {lo[k]}..{hi[k]})"
            )


def _codes(codes: np.ndarray, what: str, width: int) -> np.ndarray:
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[1] != width:
        raise ValueError(f"{what} must be a 2-D array with {width} columns (found {codes.shape})")
    if not np.issubdtype(codes.dtype, np.integer):
        raise ValueError(f"{what} must hold integer codes (found {codes.dtype})")
    dtype = codes.dtype if codes.dtype in (np.int16, np.int32) else np.int32
    if codes.dtype != dtype and codes.size and (codes.max() >= 2**31 or codes.min() < -(2**31)):
        raise ValueError(f"{what}: codes out of the int32 range")
    return np.ascontiguousarray(codes, dtype=dtype)


def _check_range(codes: np.ndarray, dims: Sequence, what: str) -> None:
    if not len(codes) or not codes.shape[1]:
        return
    from mismatchctl.stats.cube import kernels as cube_kernels

    lo, hi = cube_kernels.column_ranges(codes)
    for k, d in enumerate(dims):
        if lo[k] < 0 or hi[k] >= d.size:
            raise ValueError(
                f"{what}: codes of dimension {d.name!r} must lie in 0..{d.size - 1} "
                f"(found {lo[k]}..{hi[k]})"
            )


@functools.lru_cache(maxsize=16)
def kernel_layout(spec: CubeSpec) -> tuple:
    """The arrays :func:`cube_kernels.cube_accumulate` walks: value maps, the projections of the
    token codes (one per distinct (token dimensions, blocked) of a table) and every table's
    offset and strides, and each projection's cells."""
    n_dt = spec.n_token_dims
    tcard = np.array([d.size for d in spec.token_dims], dtype=np.int64)
    tmul = np.ones(n_dt, dtype=np.int64)
    for k in range(n_dt - 2, -1, -1):
        tmul[k] = tmul[k + 1] * tcard[k + 1]
    combo_size = int(np.prod(tcard)) if n_dt else 1
    if combo_size > MAX_COMBOS:
        raise ValueError(
            f"the token dimensions have {combo_size} combinations (at most {MAX_COMBOS}): "
            "bin some of them more coarsely"
        )
    vmap, exact_off, block_off = _value_maps(spec)
    projections: dict[tuple, int] = {}
    tab = _TableArrays(len(spec.tables))
    for i, t in enumerate(spec.tables):
        tab.fill(i, t, spec, exact_off, block_off, projections)
    pdims, pmaps, pmul, psize = _projection_arrays(projections, spec, exact_off, block_off)
    psizes = np.array(psize, dtype=np.int64)
    order = np.argsort(tab.proj, kind="stable")
    order = order[tab.proj[order] >= 0]
    ptab_ptr = np.searchsorted(tab.proj[order], np.arange(len(projections) + 1)).astype(np.int64)
    qonly = np.flatnonzero(tab.proj < 0).astype(np.int64)
    return (
        tmul, tcard, combo_size, vmap, pdims, pmaps, pmul, int(max(psize, default=1)),
        ptab_ptr, order.astype(np.int64), qonly, tab.off, tab.pstride, tab.qdims, tab.qmaps,
        tab.qstride, psizes,
    )  # fmt: skip


def _value_maps(spec: CubeSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All dimensions' code -> exact value and code -> block maps, concatenated."""
    parts, exact_off, block_off, off = [], [], [], 0
    for d in range(len(spec.dims)):
        size = spec.dims[d].size
        parts.append(np.arange(size, dtype=np.int64))
        exact_off.append(off)
        off += size
        if spec.blocked(d):
            parts.append(spec.block_of(d))
            block_off.append(off)
            off += size
        else:
            block_off.append(exact_off[-1])
    return np.concatenate(parts), np.array(exact_off), np.array(block_off)


class _TableArrays:
    """Per table: projection, offset, and the strides/maps of its token and sequence dims."""

    def __init__(self, n: int) -> None:
        self.proj = np.full(n, -1, dtype=np.int64)
        self.off = np.zeros(n, dtype=np.int64)
        self.pstride = np.zeros((n, 3), dtype=np.int64)
        self.qdims = np.full((n, 3), -1, dtype=np.int64)
        self.qmaps = np.zeros((n, 3), dtype=np.int64)
        self.qstride = np.zeros((n, 3), dtype=np.int64)

    def fill(
        self,
        i: int,
        t: Table,
        spec: CubeSpec,
        exact_off: np.ndarray,
        block_off: np.ndarray,
        projections: dict[tuple, int],
    ) -> None:
        strides = [int(np.prod(t.shape[k + 1 :])) for k in range(len(t.dims))]
        self.off[i] = t.offset
        key = tuple((d, b) for d, b in zip(t.dims, t.blocked, strict=True) if spec.is_token_dim(d))
        if key:
            self.proj[i] = projections.setdefault(key, len(projections))
        p = q = 0
        for d, b, stride in zip(t.dims, t.blocked, strides, strict=True):
            if spec.is_token_dim(d):
                self.pstride[i, p] = stride
                p += 1
            else:
                self.qdims[i, q] = d
                self.qmaps[i, q] = block_off[d] if b else exact_off[d]
                self.qstride[i, q] = stride
                q += 1


def _projection_arrays(
    projections: dict[tuple, int], spec: CubeSpec, exact_off: np.ndarray, block_off: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    j = len(projections)
    pdims = np.full((j, 3), -1, dtype=np.int64)
    pmaps = np.zeros((j, 3), dtype=np.int64)
    pmul = np.zeros((j, 3), dtype=np.int64)
    psize = []
    for key, idx in projections.items():
        sizes = [spec.block_cap if b else spec.dims[d].size for d, b in key]
        mul = 1
        for k in range(len(key) - 1, -1, -1):
            d, b = key[k]
            pdims[idx, k] = d - spec.n_seq_dims  # the token dimension's column
            pmaps[idx, k] = block_off[d] if b else exact_off[d]
            pmul[idx, k] = mul
            mul *= sizes[k]
        psize.append(mul)
    return pdims, pmaps, pmul, psize
