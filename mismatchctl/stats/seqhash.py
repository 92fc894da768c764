"""Content hashes of whole sequences (compiled, numba): what `compare` pairs sequences by.

Per token ``v = mix(mix(id + L0) ^ position * L2)`` (``mix``: splitmix64's finaliser, wrapping
uint64 arithmetic); per sequence ``h1 = sum v``, ``h2 = sum mix(v ^ L1)`` (mod 2**64: the position
is inside every term, so order counts) and, of its rollout logprobs' float64 bits ``b``,
``hr = sum mix(mix(b + L1) ^ position * L2)``. One pass over the tokens (the numpy form of the
same takes a dozen), ``nogil`` so the engine's threads run it in parallel. Compiled on first use
and cached, like ``stats/kernels.py``.
"""

from __future__ import annotations

import numpy as np

from mismatchctl.stats.numba_load import kernel

_L0 = np.uint64(0x9E3779B97F4A7C15)
_L1 = np.uint64(0xD6E8FEB86659FD93)
_L2 = np.uint64(0xA0761D6478BD642F)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


@kernel(nogil=True)
def _mix(x: np.uint64) -> np.uint64:
    x ^= x >> _S30
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    return x


@kernel(nogil=True)
def sequence_hashes(
    ids: np.ndarray,
    missing: np.ndarray,
    position: np.ndarray,
    rollout_bits: np.ndarray,
    starts: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Per sequence (``starts``: the first row of each, ascending), ``(h1, h2, hr)`` as a
    ``(m, 3)`` uint64 array, and whether none of its tokens is ``missing`` an id. ``ids`` and
    ``rollout_bits`` are uint64 views (ids >= 0; a missing id's value is ignored by the flag,
    not by the hash)."""
    n = len(ids)
    m = len(starts)
    out = np.zeros((m, 3), np.uint64)
    complete = np.ones(m, np.bool_)
    for j in range(m):
        end = starts[j + 1] if j + 1 < m else n
        h1 = np.uint64(0)
        h2 = np.uint64(0)
        hr = np.uint64(0)
        for i in range(starts[j], end):
            if missing[i]:
                complete[j] = False
            place = np.uint64(position[i]) * _L2
            v = _mix(_mix(ids[i] + _L0) ^ place)
            h1 += v
            h2 += _mix(v ^ _L1)
            hr += _mix(_mix(rollout_bits[i] + _L1) ^ place)
        out[j, 0] = h1
        out[j, 1] = h2
        out[j, 2] = hr
    return out, complete


@kernel(nogil=True)
def content_hashes(
    offsets: np.ndarray,
    rollout_bits: np.ndarray,
    trainer_bits: np.ndarray,
    mask: np.ndarray,
    token_bits: np.ndarray,
) -> np.ndarray:
    """Ingest's duplicate keys (``ingest/duplicates.py``, whose numpy form is the reference): per
    sequence ``i`` of ``offsets``, ``(mix(T + L0) + sum v, mix(T + L1) + sum mix(v ^ L1))`` with
    ``T`` its length and, per position ``p`` of it, ``v = mix((mix(r + L0) ^ mix(t + L1)) + m ^
    mix(k + L2) ^ p * L2)`` of the float64 bits of both logprobs, the mask value and the token id's
    bits (``mask`` / ``token_bits`` empty: not in the dump, their terms left out). One pass, no
    temporaries (the numpy form takes about 30 over the tokens)."""
    n = len(offsets) - 1
    out = np.empty((n, 2), np.uint64)
    has_mask = len(mask) > 0
    has_tokens = len(token_bits) > 0
    for i in range(n):
        lo = offsets[i]
        hi = offsets[i + 1]
        length = np.uint64(hi - lo)
        a = _mix(length + _L0)
        b = _mix(length + _L1)
        for j in range(lo, hi):
            v = _mix(rollout_bits[j] + _L0) ^ _mix(trainer_bits[j] + _L1)
            if has_mask:
                v += np.uint64(mask[j])
            if has_tokens:
                v ^= _mix(token_bits[j] + _L2)
            v ^= np.uint64(j - lo) * _L2
            v = _mix(v)
            a += v
            b += _mix(v ^ _L1)
        out[i, 0] = a
        out[i, 1] = b
    return out
