"""Per-sequence sums of a run that the length-scaling and batch-shape tests read: each
sequence's model tokens ``T``, summed log ratio ``sum r``, summed K3, step, batch size and its
tokens per probability bin. Mergeable by concatenation (one row per sequence; a sequence is
never split across parts)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mismatchctl.stats import per_token

UNKNOWN = -1  # a batch size the dump does not give


@dataclass
class RunSeqSums:
    """One run's sequences: arrays of one value per sequence, ``bins`` one row per sequence of
    token counts per probability bin, ``k3_bins`` the K3 sums alike; ``line``: per sequence,
    over its tokens with finite logprobs on both sides, their count and the sums of ``lr``,
    ``lr^2``, ``r`` and ``lr r`` (the line of the trainer's logprobs on the rollout's:
    ``stats/line_slope.py``)."""

    step: np.ndarray
    tokens: np.ndarray
    r_sum: np.ndarray
    k3: np.ndarray
    batch_size: np.ndarray
    bins: np.ndarray
    k3_bins: np.ndarray
    line: np.ndarray = field(default_factory=lambda: np.zeros((0, 5)))


_FIELDS = ("step", "tokens", "r_sum", "k3", "batch_size", "bins", "k3_bins", "line")


class SeqSums:
    """Per run, its ``RunSeqSums`` (``runs``). A merge lists the parts' rows and ``runs`` joins
    them once when read: merging each part into a total that was concatenated anew every time
    copied every row read before (quadratic over a run of 1,000 parts). The rows are the same
    and in the same order either way."""

    def __init__(self, runs: dict[str, RunSeqSums] | None = None) -> None:
        self._pieces: dict[str, list[RunSeqSums]] = {r: [s] for r, s in (runs or {}).items()}

    @property
    def runs(self) -> dict[str, RunSeqSums]:
        joined = {run: _join(pieces) for run, pieces in self._pieces.items()}
        self._pieces = {run: [sums] for run, sums in joined.items()}  # joined once
        return joined

    def merge(self, other: SeqSums) -> SeqSums:
        out = SeqSums()
        out._pieces = {run: list(pieces) for run, pieces in self._pieces.items()}
        return out.merge_into(other)

    def merge_into(self, other: SeqSums) -> SeqSums:
        """``other``'s rows added to this state's (in place: an engine's running total)."""
        for run, pieces in other._pieces.items():
            self._pieces.setdefault(run, []).extend(pieces)
        return self


def _join(pieces: list[RunSeqSums]) -> RunSeqSums:
    if len(pieces) == 1:
        return pieces[0]
    return RunSeqSums(*(np.concatenate([getattr(p, n) for p in pieces]) for n in _FIELDS))


def seq_sums(
    run: str,
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    step: np.ndarray,
    batch_size: np.ndarray,
    bins: np.ndarray,
    n_bins: int,
    log_ratio: tuple[np.ndarray, np.ndarray] | None = None,
    starts: np.ndarray | None = None,
) -> SeqSums:
    """The sums of a slice of whole sequences (tokens in sequence order); ``batch_size`` and
    ``bins`` per token (the batch size is constant along a sequence: its first token's);
    ``log_ratio``: each token's ``r = lt - lr`` and its K3 when the caller has them
    (``PartKeys.log_ratio``: the same numpy expressions as here); ``starts``: each sequence's
    first row (``PartKeys.sequence_starts``)."""
    if len(seq) == 0:
        return SeqSums()
    if starts is None:
        starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    if log_ratio is None:
        with np.errstate(over="ignore", invalid="ignore"):
            log_ratio = lt - lr, per_token.k3(lt - lr)
    r, k3 = log_ratio
    counts, k3_bins, line = _walk(starts, bins, n_bins, k3, lr, r)
    sums = RunSeqSums(
        step[starts].astype(np.int64),
        np.diff(np.r_[starts, len(seq)]).astype(np.float64),
        np.add.reduceat(r, starts),
        k3_bins.sum(axis=1),
        batch_size[starts].astype(np.int64),
        counts,
        k3_bins,
        line,
    )
    return SeqSums({run: sums})


def _walk(
    starts: np.ndarray, bins: np.ndarray, n_bins: int, k3: np.ndarray, lr: np.ndarray, r: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sequence: its tokens and K3 per bin, and over its tokens with finite ``lr`` and ``r``
    their count and the sums of ``lr``, ``lr^2``, ``r`` and ``lr r``: one compiled walk in token
    order (``diagnose_kernels.sequence_sums``; the bins' sums are ``bincount``'s, bit for bit)."""
    from mismatchctl.stats import diagnose_kernels

    counts, k3_bins = np.zeros((len(starts), n_bins)), np.zeros((len(starts), n_bins))
    line = np.zeros((len(starts), 5))
    bad = diagnose_kernels.sequence_sums(
        np.asarray(starts, np.int64), np.ascontiguousarray(bins, np.int64),
        np.ascontiguousarray(k3, np.float64), np.ascontiguousarray(lr, np.float64),
        np.ascontiguousarray(r, np.float64), counts, k3_bins, line,
    )  # fmt: skip
    if bad >= 0:
        raise ValueError(f"probability bins must lie in 0..{n_bins - 1} (found {bins[bad]})")
    return counts, k3_bins, line
