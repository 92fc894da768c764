"""What the findings' bootstrap needs of a selection's tokens, kept by the cube's own pass: per
sequence, its key, its codes of the sequence dimensions and its tokens and K3 sum in each
combination of token codes it visits (a *cell* of the cube's kernel layout: the combination's
code ``sum_k code_k * tmul[k]``, :func:`stats.cube.kernel_layout`), in the order the sequence
first visits them.

The cube's kernel buffers exactly these sums while it walks a sequence (``cube_kernels``), so
keeping them costs a copy per cell; a region (a set of values per dimension) is a union of cells,
so the bootstrap sums a sequence's cells instead of re-reading its tokens. About 16 bytes a cell
and a few dozen cells a sequence (~40 MB for 100M tokens in sequences of ~2,000).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SequenceCells:
    """``keys``: each sequence's key (``cube_bootstrap.sequence_keys``); ``seq_codes``: its
    codes of the sequence dimensions (sequences x dims); ``ptr``: its first cell (plus the end);
    ``combo``, ``tokens``, ``k3``: each cell's code, tokens and K3 sum."""

    keys: np.ndarray  # uint64
    seq_codes: np.ndarray  # int32
    ptr: np.ndarray  # int64
    combo: np.ndarray  # int32
    tokens: np.ndarray  # int32
    k3: np.ndarray  # float64

    def __post_init__(self) -> None:
        n = len(self.keys)
        if self.ptr.shape != (n + 1,) or len(self.seq_codes) != n:
            raise ValueError(
                f"one key, one row of codes and one pointer per sequence (found {n} keys, "
                f"{len(self.seq_codes)} rows, {len(self.ptr)} pointers)"
            )
        cells = int(self.ptr[-1])
        if not (len(self.combo) == len(self.tokens) == len(self.k3) == cells):
            raise ValueError(f"combo, tokens and k3 must hold the {cells} cells")

    @property
    def sequences(self) -> int:
        return len(self.keys)

    @property
    def cells(self) -> int:
        return len(self.combo)

    @property
    def nbytes(self) -> int:
        arrays = (self.keys, self.seq_codes, self.ptr, self.combo, self.tokens, self.k3)
        return sum(a.nbytes for a in arrays)
