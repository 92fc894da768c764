"""Bottom-k priority sample of segments: a bounded, mergeable, deterministic set of scatter points.

Every segment gets a 64-bit priority, a hash of (seed, run, seq, turn kind); the sample keeps, per
turn kind, the ``k`` segments with the smallest priority. The k smallest of a union are the k
smallest of the parts' k smallest, so the merge is exact and the result depends neither on how
the tokens were split into parts nor on the order of merging: only on the set of segments and the
seed. Ties of priority (about one in 2**64 pairs) are broken by (run, seq), so even they are
deterministic. Per kind, so a rare kind (later turns) keeps its k points next to a common one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields, replace

import numpy as np

from mismatchctl.stats.segments import Segments

DEFAULT_K = 2000

# splitmix64 finalizer constants: a bijection of uint64 with good avalanche
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def mix64(x: np.ndarray, in_place: bool = False) -> np.ndarray:
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic): every input bit moves
    every output bit; ``in_place`` overwrites ``x`` (a uint64 array) instead of copying it."""
    x = x if in_place else np.asarray(x, dtype=np.uint64).copy()
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


def run_hash(run: str, seed: int) -> np.uint64:
    """A stable 64-bit hash of (seed, run): Python's ``hash`` is salted per process."""
    digest = hashlib.blake2b(f"{seed}\0{run}".encode(), digest_size=8).digest()
    return np.uint64(int.from_bytes(digest, "little"))


def priorities(run: str, seq: np.ndarray, kind: np.ndarray, seed: int) -> np.ndarray:
    """Priority of each (run, seq, kind); distinct within a run (``mix64`` is a bijection)."""
    key = np.asarray(seq, dtype=np.int64).astype(np.uint64) * np.uint64(2)
    key += np.asarray(kind, dtype=np.int64).astype(np.uint64)
    return mix64(mix64(key) ^ run_hash(run, seed))


@dataclass(frozen=True)
class SegmentSample:
    """Up to ``k`` segments per kind, in order of (kind, priority, run, seq)."""

    k: int
    seed: int
    priority: np.ndarray  # uint64
    run: np.ndarray  # object (str)
    seq: np.ndarray  # int64
    kind: np.ndarray  # int64
    step: np.ndarray  # int64
    tokens: np.ndarray  # int64
    rollout_log_ppl: np.ndarray  # float64
    trainer_log_ppl: np.ndarray  # float64

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be at least 1 (found {self.k})")

    @classmethod
    def empty(cls, k: int = DEFAULT_K, seed: int = 0) -> SegmentSample:
        i = np.zeros(0, np.int64)
        f = np.zeros(0, np.float64)
        return cls(k, seed, np.zeros(0, np.uint64), np.zeros(0, object), i, i, i, i, f, f)

    @classmethod
    def of(cls, run: str, segs: Segments, k: int = DEFAULT_K, seed: int = 0) -> SegmentSample:
        """The sample of the segments of one run (one part, or any whole-sequence chunk)."""
        full = cls(
            k,
            seed,
            priorities(run, segs.seq, segs.kind, seed),
            np.full(len(segs), run, dtype=object),
            segs.seq,
            segs.kind,
            segs.step,
            segs.tokens,
            segs.rollout_log_ppl,
            segs.trainer_log_ppl,
        )
        return full._bottom_k()

    def __len__(self) -> int:
        return len(self.priority)

    def merge(self, other: SegmentSample) -> SegmentSample:
        """Exact: the bottom k per kind of the union."""
        if (self.k, self.seed) != (other.k, other.seed):
            raise ValueError("cannot merge samples with different k or seed")
        joined = {f: np.concatenate([getattr(self, f), getattr(other, f)]) for f in _ARRAY_FIELDS}
        return replace(self, **joined)._bottom_k()

    def _bottom_k(self) -> SegmentSample:
        candidates = _candidates(self.priority, self.kind, self.k)
        order = np.lexsort(
            (
                self.seq[candidates],
                self.run[candidates],
                self.priority[candidates],
                self.kind[candidates],
            )
        )
        idx = candidates[order]
        kinds = self.kind[idx]
        rank = np.arange(len(idx)) - np.searchsorted(kinds, kinds, side="left")
        idx = idx[rank < self.k]
        return replace(self, **{f: getattr(self, f)[idx] for f in _ARRAY_FIELDS})


_ARRAY_FIELDS = tuple(f.name for f in fields(SegmentSample) if f.name not in ("k", "seed"))


def _candidates(priority: np.ndarray, kind: np.ndarray, k: int) -> np.ndarray:
    """Indices that can be in the bottom k of their kind: a cheap cut before the full sort
    (keeps ties at the k-th priority, which the sort then resolves)."""
    keep = np.zeros(len(priority), dtype=bool)
    for code in np.unique(kind):
        members = np.flatnonzero(kind == code)
        if len(members) <= k:
            keep[members] = True
            continue
        cut = np.partition(priority[members], k - 1)[k - 1]
        keep[members[priority[members] <= cut]] = True
    return np.flatnonzero(keep)
