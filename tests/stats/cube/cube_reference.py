"""A plain numpy reference of the K3 cube (slow, obviously correct) and small random inputs."""

from __future__ import annotations

import numpy as np

from mismatchctl.stats.cube.cube import N_FIELDS
from mismatchctl.stats.cube.spec import CubeSpec, Dim


def reference_state(
    spec: CubeSpec,
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    tok: np.ndarray,
    seqc: np.ndarray,
) -> np.ndarray:
    """Every table of the cube by grouping tokens with ``np.unique``: first per (sequence,
    cell), then per cell."""
    state = np.zeros((spec.n_cells, N_FIELDS))
    r = lt - lr
    k3 = np.expm1(r) - r
    # every dimension's code per token, in the global order: sequence dims (through seq), then
    # token dims
    codes = np.concatenate([seqc[seq], tok], axis=1)
    for t in spec.tables:
        cell = np.zeros(len(lr), dtype=np.int64)
        for d, blocked in zip(t.dims, t.blocked, strict=True):
            size = spec.block_cap if blocked else spec.dims[d].size
            value = spec.block_of(d)[codes[:, d]] if blocked else codes[:, d]
            cell = cell * size + value
        pairs, inverse = np.unique(np.column_stack([seq, cell]), axis=0, return_inverse=True)
        inverse = inverse.ravel()
        x = np.bincount(inverse, minlength=len(pairs)).astype(float)
        y = np.bincount(inverse, weights=k3, minlength=len(pairs))
        for (s, c), xi, yi in zip(pairs, x, y, strict=True):
            tx, ty = float(np.sum(seq == s)), float(np.sum(k3[seq == s]))
            row = state[t.offset + c]
            row += (xi, yi, yi * yi, xi * xi, xi * yi, 1.0, ty * yi, tx * yi, ty * xi, tx * xi)
    return state


def small_spec(block_cap: int = 3, max_order: int = 3) -> CubeSpec:
    """Three token and two sequence dimensions; with the default cap of 3, ``step`` (7 values)
    and ``bin`` (4 values) are seen in blocks."""
    return CubeSpec(
        token_dims=(
            Dim("turn", 3),
            Dim("turn_kind", 2, labels=("first", "later"), function_of="turn"),
            Dim("bin", 4),
        ),
        seq_dims=(Dim("step", 7), Dim("gpu", 2, labels=("A100", "H20"), ordered=False)),
        block_cap=block_cap,
        max_order=max_order,
    )


def random_tokens(
    spec: CubeSpec, rng: np.random.Generator, n_seq: int, max_len: int = 40
) -> tuple[np.ndarray, ...]:
    """Sequences of 1..max_len tokens with heavy-tailed K3, random codes (turn_kind follows
    turn), rows of seq_codes in a shuffled order."""
    lengths = rng.integers(1, max_len + 1, n_seq)
    order = rng.permutation(n_seq)
    seq = np.repeat(order, lengths)
    n = len(seq)
    lr = -rng.exponential(rng.choice([0.01, 0.5, 4.0], n))
    lt = lr + rng.standard_t(3, n) * 0.05 * (1 + np.sqrt(-lr))
    tok = np.column_stack([rng.integers(0, d.size, n) for d in spec.token_dims])
    if spec.token_dims and spec.token_dims[1].name == "turn_kind":
        tok[:, 1] = tok[:, 0] > 0
    seqc = np.column_stack([rng.integers(0, d.size, n_seq) for d in spec.seq_dims])
    return lr, lt, seq, tok.astype(np.int16), seqc.astype(np.int64)
