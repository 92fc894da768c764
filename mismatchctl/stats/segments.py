"""Per-segment log-perplexities of one chunk of tokens (the points of the log-ppl scatter).

A segment is the tokens of one sequence in one turn kind (METRICS.md); per segment
``rollout_log_ppl_i = -mean(lr)`` and ``trainer_log_ppl_i = -mean(lt)``, as ``Partial`` defines
them. A chunk holds whole sequences, so every segment is complete within it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Segments:
    """One entry per segment, ordered by (sequence, kind)."""

    seq: np.ndarray  # int64
    kind: np.ndarray  # int64 turn-kind code
    step: np.ndarray  # int64 (a sequence belongs to one step)
    tokens: np.ndarray  # int64 number of tokens of the segment
    rollout_log_ppl: np.ndarray  # float64
    trainer_log_ppl: np.ndarray  # float64

    def __len__(self) -> int:
        return len(self.seq)


def segments(
    seq: np.ndarray,
    kind: np.ndarray,
    step: np.ndarray,
    lr: np.ndarray,
    lt: np.ndarray,
    n_kinds: int = 2,
) -> Segments:
    """The segments of a chunk from per-token sequence ids, kind codes (``0..n_kinds-1``), steps
    and rollout/trainer logprobs."""
    seq = np.asarray(seq, dtype=np.int64)
    kind = np.asarray(kind, dtype=np.int64)
    step = np.asarray(step, dtype=np.int64)
    lr, lt = np.asarray(lr, dtype=np.float64), np.asarray(lt, dtype=np.float64)
    if any(a.shape != seq.shape for a in (kind, step, lr, lt)) or seq.ndim != 1:
        raise ValueError("seq, kind, step, lr and lt must be 1-D of one length")
    if len(seq) == 0:
        empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0, np.float64)
        return Segments(empty_i, empty_i, empty_i, empty_i, empty_f, empty_f.copy())
    key = seq * n_kinds + kind
    if np.any(key[1:] < key[:-1]):
        # Parts store sequences in order with turns in order, so this sort is the rare path.
        order = np.argsort(key, kind="stable")
        key, step, lr, lt = key[order], step[order], lr[order], lt[order]
    starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    length = np.diff(np.append(starts, len(key)))
    return Segments(
        seq=key[starts] // n_kinds,
        kind=key[starts] % n_kinds,
        step=step[starts],
        tokens=length.astype(np.int64),
        rollout_log_ppl=-np.add.reduceat(lr, starts) / length,
        trainer_log_ppl=-np.add.reduceat(lt, starts) / length,
    )
