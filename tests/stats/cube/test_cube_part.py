"""A part's sparse cube: the engine's fold of sparse parts equals the dense fold bit for bit,
whatever the rows it started with, and it pickles only the rows it uses."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from mismatchctl.stats.cube import part as cube_part
from mismatchctl.stats.cube.cube import Cube
from mismatchctl.stats.cube.part import PartCube, PartStates, as_cube, fold
from tests.stats.cube.cube_reference import random_tokens, small_spec


def _parts(seed: int, n: int, groups: bool = False) -> list[tuple[np.ndarray, ...]]:
    """``n`` slices of one step's sequences (as a part of one step file); ``groups``: their
    codes of the sequence dimensions drawn from three rows, interleaved (the kernel sums the
    sequences of each such group first)."""
    spec = small_spec(3)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        lr, lt, seq, tok, seqc = random_tokens(spec, rng, 12)
        seqc[:, 0] = seed % spec.dims[0].size
        if groups:
            seqc = seqc[rng.integers(0, 3, len(seqc))]
        out.append((lr, lt, seq, tok, seqc))
    return out


@pytest.mark.parametrize("groups", [False, True])
@pytest.mark.parametrize("first_rows", [1, 7, 1 << 14])
def test_sparse_parts_fold_to_the_dense_fold_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch, first_rows: int, groups: bool
) -> None:
    """Parts of two slices each: every part's state sparse (from one row, grown as sequences
    need more: a group of sequences is then summed again, whole) and folded in order gives the
    same bits as dense parts folded by addition."""
    monkeypatch.setattr(cube_part, "FIRST_ROWS", first_rows)
    spec = small_spec(3)
    parts = [_parts(seed, 2, groups) for seed in range(5)]
    dense_total = None
    sparse_total: Cube | PartCube | None = None
    for slices in parts:
        dense, sparse = Cube(spec), PartCube(spec)
        for lr, lt, seq, tok, seqc in slices:
            dense.add(lr, lt, seq, tok, seqc)
            sparse.add(lr, lt, seq, tok, seqc)
        assert sparse.used == np.count_nonzero(dense.state[:, 0]) < spec.n_cells
        dense_total = dense if dense_total is None else dense_total.merge_into(dense)
        sparse_total = sparse if sparse_total is None else fold(sparse_total, sparse)
    assert dense_total is not None and sparse_total is not None
    assert np.array_equal(as_cube(sparse_total).state, dense_total.state)


def test_a_part_keeps_the_sequences_cells_as_a_dense_cube_does() -> None:
    spec = small_spec(3)
    ((lr, lt, seq, tok, seqc),) = _parts(11, 1)
    keys = np.arange(len(seqc), dtype=np.uint64) + 100
    want = Cube(spec).add(lr, lt, seq, tok, seqc, keys)
    got = PartCube(spec).add(lr, lt, seq, tok, seqc, keys)
    assert want is not None and got is not None
    for field in ("keys", "seq_codes", "ptr", "combo", "tokens", "k3"):
        assert np.array_equal(getattr(got, field), getattr(want, field)), field


def test_a_pickled_part_holds_its_rows_only_and_folds_the_same() -> None:
    spec = small_spec(3)
    ((lr, lt, seq, tok, seqc),) = _parts(5, 1)
    part = PartCube(spec)
    part.add(lr, lt, seq, tok, seqc)
    sent = pickle.dumps(part)
    assert len(sent) < part.nbytes
    back = pickle.loads(sent)
    assert np.array_equal(back.dense().state, part.dense().state)
    back.add(lr, lt, seq, tok, seqc)  # its slots were rebuilt: it takes more tokens
    part.add(lr, lt, seq, tok, seqc)
    assert np.array_equal(back.dense().state, part.dense().state)


def test_the_first_state_of_each_key_is_dense() -> None:
    states = PartStates(small_spec(3))
    assert isinstance(states.new("a"), Cube)
    assert isinstance(states.new("a"), PartCube)
    assert isinstance(states.new("b"), Cube)
    copy = pickle.loads(pickle.dumps(states))  # a Ray task's: starts afresh
    assert isinstance(copy.new("a"), Cube)
