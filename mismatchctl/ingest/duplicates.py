"""Exact duplicate sequences within a step: the sign of a double write.

Sample ids are not unique (verl's ``uid`` is one per prompt group, shared by its n responses),
so nothing rests on them; but two sequences of one step with the same sample id, the same token
ids, the same mask and the same two logprob vectors (every listed position, bit for bit) are one
sequence written twice. Each sequence gets a 128-bit content key at ingest (a few vectorised
passes over its values; with the step, 24 bytes per sequence); after the last file of an ingest,
one sort says which keys repeat an earlier one, in input order (the first copy is kept as the
original), and each file is charged with its repeats. Sequences are only counted, never dropped:
the numbers say how much of the data is doubled.
"""

from __future__ import annotations

import hashlib

import numpy as np

from mismatchctl.ingest.batch import RaggedBatch
from mismatchctl.stats.sample import mix64

KEY = np.dtype("V24")  # step, two 64-bit content hashes
COMPILED_FROM = 1 << 18  # positions of a batch from which its hashes take the compiled pass
_LANES = (
    np.uint64(0x9E3779B97F4A7C15),
    np.uint64(0xD6E8FEB86659FD93),
    np.uint64(0xA0761D6478BD642F),
)


def _bits(values: np.ndarray, dtype: type) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=dtype).view(np.uint64)


def _token_hashes(batch: RaggedBatch) -> np.ndarray:
    """One 64-bit value per position, of its values and its index in its sequence."""
    lengths = batch.lengths()
    position = np.arange(len(batch.rollout), dtype=np.uint64)
    position -= np.repeat(batch.offsets[:-1].astype(np.uint64), lengths)
    v = _mixed(_bits(batch.rollout, np.float64) + _LANES[0])
    v ^= _mixed(_bits(batch.trainer, np.float64) + _LANES[1])
    if batch.mask is not None:
        v += batch.mask.astype(np.uint64)
    if batch.token_ids is not None and len(batch.token_ids) == len(v):
        v ^= _mixed(_bits(batch.token_ids, np.int64) + _LANES[2])
    v ^= position * _LANES[2]
    return _mixed(v)


def _hashes(batch: RaggedBatch) -> np.ndarray:
    """Two 64-bit hashes per sequence: sums (mod 2**64) of its positions' values, mixed two
    ways; the position inside the sequence is part of each value, so order counts. Batches of
    :data:`COMPILED_FROM` positions or more take the compiled pass (``stats/seqhash.py``, the
    same values); smaller ones do not load numba."""
    if len(batch.rollout) >= COMPILED_FROM:
        return _compiled_hashes(batch)
    return numpy_hashes(batch)


def _compiled_hashes(batch: RaggedBatch) -> np.ndarray:
    from mismatchctl.stats.seqhash import content_hashes  # numba: on first use

    none = np.empty(0, np.uint64)
    mask = none if batch.mask is None else np.ascontiguousarray(batch.mask, dtype=np.uint8)
    tokens = batch.token_ids
    token_bits = (
        none if tokens is None or len(tokens) != len(batch.rollout) else _bits(tokens, np.int64)
    )
    return content_hashes(
        np.ascontiguousarray(batch.offsets, dtype=np.int64),
        _bits(batch.rollout, np.float64),
        _bits(batch.trainer, np.float64),
        mask,
        token_bits,
    )


def numpy_hashes(batch: RaggedBatch) -> np.ndarray:
    """:func:`_hashes` in numpy (the reference of the compiled pass)."""
    out = np.zeros((batch.n, 2), np.uint64)
    lengths = batch.lengths()
    full = lengths > 0
    out[:, 0] = _mixed(lengths.astype(np.uint64) + _LANES[0])
    out[:, 1] = _mixed(lengths.astype(np.uint64) + _LANES[1])
    if full.any():
        v = _token_hashes(batch)
        starts = batch.offsets[:-1][full]
        out[full, 0] += np.add.reduceat(v, starts)
        out[full, 1] += np.add.reduceat(_mixed(v ^ _LANES[1]), starts)
    return out


def sequence_keys(batch: RaggedBatch) -> np.ndarray:
    """One key per sequence of the batch: step, and a 128-bit hash of its sample id, token ids,
    mask and both logprob vectors."""
    hashes = _hashes(batch)
    ids = np.array(
        [
            int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest())
            for s in batch.sample_ids
        ],
        dtype=np.uint64,
    ).reshape(-1)
    rows = np.empty((batch.n, 3), np.uint64)
    rows[:, 0] = batch.steps.astype(np.int64).view(np.uint64)
    rows[:, 1] = hashes[:, 0] ^ ids
    rows[:, 2] = hashes[:, 1] + ids
    return rows.view(KEY).reshape(-1)


def repeats_in_order(keys: list[np.ndarray]) -> list[int]:
    """For each file's keys, in input order: how many of its sequences repeat a sequence met
    before (earlier in that file, or in an earlier file)."""
    if not keys:
        return []
    everything = np.concatenate(keys) if len(keys) > 1 else keys[0]
    owner = np.repeat(np.arange(len(keys)), [len(k) for k in keys])
    repeat = np.ones(len(everything), dtype=bool)
    if len(everything):
        _, first = np.unique(everything, return_index=True)
        repeat[first] = False
    return np.bincount(owner[repeat], minlength=len(keys)).tolist()


def _mixed(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place (``x`` is a fresh array of the caller's)."""
    return mix64(x, in_place=True)
