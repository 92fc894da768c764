"""Sentinel values among model tokens: fills that a writer put where a logprob should be.

Two kinds survive ingest (which rejects NaN and infinities):

- *very low* values, ``<= SENTINEL_MAX`` (-1000): SkyRL writes -9999 at masked positions, so one
  among model tokens means a mask and a value array disagree; no sampled token has a logprob
  anywhere near that (it would be a probability of e^-1000);
- *one-sided zero runs*: ``ZERO_RUN_MIN`` or more consecutive tokens of a turn where the same
  side is exactly 0.0 and the other is not, and where the other side says at least once that the token
  was not near-certain (``<= FILL_OTHER_MAX``, p <= 0.5). verl and slime write 0.0 at masked
  positions; a shifted or truncated mask leaves such fills in a row. Real tokens also have
  logprob 0.0: a probability that rounds to 1 (the other side is then near 0 too), or a top-p
  nucleus of one token renormalised to 1 (the other side is then log p >= log top_p, above
  log 0.5 for any top_p >= 0.5). Neither reaches the other-side test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

import numpy as np

SENTINEL_MAX = -1000.0
FILL_OTHER_MAX = math.log(0.5)
ZERO_RUN_MIN = 4
PAD_RUN_MIN = 8
"""Padding stored as tokens: this many positions or more at the end of a sequence, each exactly
0.0 on both sides. Right padding fills every response shorter than the batch's longest (usually
by tens to thousands of positions), and verl and slime write 0.0 on both sides there. A real
response can end in exact 0.0 on both sides too: a token whose probability rounds to 1 in
float32 on both sides (a closing tag, the end-of-sequence token after a stop string), one to three
of them in a row; eight in a row at exactly 0.0 on both sides is not seen in sampled text."""
MAX_EXAMPLES = 10  # offending sequences kept as evidence: (label, step, seq, what)
C = TypeVar("C", bound=Any)  # a dataclass of counts and examples (``merge_counts``)


@dataclass
class SentinelState:
    tokens: int = 0
    low_rollout: int = 0
    low_trainer: int = 0
    zero_rollout: int = 0  # one-sided exact zeros (fills or not)
    zero_trainer: int = 0
    zero_run_tokens: int = 0  # tokens of one-sided zero runs that look like fills
    steps: dict[int, int] = field(default_factory=dict)  # step -> offending tokens
    examples: list[tuple[str, int, int, str]] = field(default_factory=list)
    zero_run_rollout: int = 0  # of ``zero_run_tokens``, those of runs on the rollout side
    both_tokens: int = 0  # tokens where neither side is 0.0 nor a sentinel
    both_diff: float = 0.0  # the sum of rollout minus trainer logprob over them
    turn_ends: int = 0  # turns (their last token)
    end_zeros: int = 0  # turns whose last token is one side's exact 0.0, the other's p <= 0.5
    other_zeros: int = 0  # the other tokens that are

    @property
    def sharper(self) -> float | None:
        """How much higher the side of the zero runs sits than the other on the tokens where
        neither is 0.0 (mean logprob per token; ``SHARPER_SIDE``): a side that fills 0.0
        where the other has a value agrees with it elsewhere, a side whose distribution is
        far sharper (a temperature, a logit scale it applies alone) rounds its near-certain
        tokens to p = 1 and sits above the other everywhere. None without runs, or with runs
        on both sides."""
        if not self.zero_run_tokens or not self.both_tokens:
            return None
        mean = self.both_diff / self.both_tokens
        if self.zero_run_rollout == self.zero_run_tokens:
            return mean
        return -mean if self.zero_run_rollout == 0 else None

    @property
    def offending(self) -> int:
        return self.low_rollout + self.low_trainer + self.zero_run_tokens

    def merge(self, other: SentinelState) -> SentinelState:
        """The counts and sums added, the steps' counts added, the first ``MAX_EXAMPLES``
        examples of both (sorted: the same whatever the order of the parts)."""
        steps = dict(self.steps)
        for step, count in other.steps.items():
            steps[step] = steps.get(step, 0) + count
        counts = {
            f.name: getattr(self, f.name) + getattr(other, f.name)
            for f in fields(self)
            if f.name not in ("steps", "examples")
        }
        examples = sorted({*self.examples, *other.examples})[:MAX_EXAMPLES]
        return SentinelState(**counts, steps=steps, examples=examples)


def sentinel_state(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    turn: np.ndarray,
    step: np.ndarray,
    label: str = "",
) -> SentinelState:
    """Counts over one chunk of whole sequences (tokens of a turn contiguous and in order);
    ``label`` (e.g. the run) goes into the examples. One compiled walk
    (``diagnose_kernels.sentinel_counts``); the offenders' steps and examples, rare, in numpy."""
    from mismatchctl.stats import diagnose_kernels

    bad = np.zeros(len(lr), dtype=np.bool_)
    counts = np.zeros(10, dtype=np.int64)
    diff = np.zeros(1)
    diagnose_kernels.sentinel_counts(
        np.ascontiguousarray(lr, np.float64), np.ascontiguousarray(lt, np.float64), seq, turn,
        SENTINEL_MAX, ZERO_RUN_MIN, FILL_OTHER_MAX, bad, counts, diff,
    )  # fmt: skip
    state = SentinelState(
        len(lr), *(int(c) for c in counts[:5]), zero_run_rollout=int(counts[5]),
        both_tokens=int(counts[6]), both_diff=float(diff[0]), turn_ends=int(counts[7]),
        end_zeros=int(counts[8]), other_zeros=int(counts[9]),
    )  # fmt: skip
    if bad.any():
        steps, counts = np.unique(step[bad], return_counts=True)
        state.steps = {int(s): int(c) for s, c in zip(steps, counts, strict=True)}
        state.examples = _examples(
            bad, (lr <= SENTINEL_MAX) | (lt <= SENTINEL_MAX), step, seq, label
        )
    return state


def _one_sided_runs(
    lr: np.ndarray, lt: np.ndarray, seq: np.ndarray, turn: np.ndarray
) -> np.ndarray:
    """Tokens in fill runs, each run on one side: a writer fills one side, so a token whose
    other side is the exact 0.0 (a token that side gives p = 1, e.g. a model token beside a
    tool response the rollout side fills) neither joins nor extends the run."""
    zero_r, zero_t = (lr == 0.0) & (lt != 0.0), (lt == 0.0) & (lr != 0.0)
    return _fill_runs(zero_r, lt, seq, turn) | _fill_runs(zero_t, lr, seq, turn)


def _fill_runs(
    flag: np.ndarray, other: np.ndarray, seq: np.ndarray, turn: np.ndarray
) -> np.ndarray:
    """Flagged tokens in runs of >= ZERO_RUN_MIN flagged tokens of one turn whose other-side
    value drops to FILL_OTHER_MAX or below somewhere in the run."""
    n = len(flag)
    if n == 0:
        return flag
    new = np.ones(n, dtype=bool)
    new[1:] = (flag[1:] != flag[:-1]) | (seq[1:] != seq[:-1]) | (turn[1:] != turn[:-1])
    starts = np.flatnonzero(new)
    lengths = np.diff(starts, append=n)
    lowest = np.minimum.reduceat(other, starts)
    fill = flag[starts] & (lengths >= ZERO_RUN_MIN) & (lowest <= FILL_OTHER_MAX)
    return np.repeat(fill, lengths)


def _examples(
    bad: np.ndarray, low: np.ndarray, step: np.ndarray, seq: np.ndarray, label: str
) -> list[tuple[str, int, int, str]]:
    out: set[tuple[str, int, int, str]] = set()
    for i in np.flatnonzero(bad)[: MAX_EXAMPLES * 64]:  # bounded: offenders often fill a whole row
        what = f"<= {SENTINEL_MAX:g}" if low[i] else "0.0 run"
        out.add((label, int(step[i]), int(seq[i]), what))
    return sorted(out)[:MAX_EXAMPLES]


def trailing_runs(flag: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per sequence (the sequences start at ``starts``, ascending; the last one ends at the end
    of ``flag``): how many of its last positions are flagged, in a row."""
    n = len(flag)
    ends = np.append(starts[1:], n).astype(np.int64)
    lengths = ends - starts
    out = np.zeros(len(starts), dtype=np.int64)
    full = lengths > 0
    if not full.any():
        return out
    index = np.where(flag, -1, np.arange(n, dtype=np.int64))
    last = np.maximum.reduceat(index, starts[full])  # last unflagged position (-1: none)
    s, e = starts[full], ends[full]
    out[full] = np.where(last >= s, e - 1 - last, e - s)
    return out


def fill_run_tokens(lr: np.ndarray, lt: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """Per token: whether it is in a one-sided zero run that looks like a fill (the definition
    of the module doc, within each sequence: ``seq`` is contiguous and ordered)."""
    return _one_sided_runs(lr, lt, seq, np.zeros_like(seq))


@dataclass
class TrailingZeroState:
    """Sequences that end in ``PAD_RUN_MIN`` or more tokens at exact 0.0 on both sides:
    padding stored as model tokens (a dump ingested without its mask)."""

    sequences: int = 0
    padded: int = 0  # sequences ending in such a run
    padded_tokens: int = 0  # tokens in those runs
    tokens: int = 0
    examples: list[tuple[str, int, int, int]] = field(default_factory=list)  # label, step, seq, run

    def merge(self, other: TrailingZeroState) -> TrailingZeroState:
        return merge_counts(self, other)


def merge_counts(a: C, b: C) -> C:
    """Two states of counts and ``examples`` merged: the counts added, the examples the first
    ``MAX_EXAMPLES`` of both (sorted: the same whatever the order of the parts)."""
    counts = {
        f.name: getattr(a, f.name) + getattr(b, f.name) for f in fields(a) if f.name != "examples"
    }
    examples = sorted({*a.examples, *b.examples})[:MAX_EXAMPLES]
    return type(a)(**counts, examples=examples)


def trailing_zero_state(
    lr: np.ndarray,
    lt: np.ndarray,
    seq: np.ndarray,
    step: np.ndarray,
    label: str = "",
    starts: np.ndarray | None = None,
) -> TrailingZeroState:
    """Counts over one chunk of whole sequences (each sequence's tokens contiguous, in order);
    ``starts``: each sequence's first row, when the caller has them."""
    n = len(lr)
    if n == 0:
        return TrailingZeroState()
    from mismatchctl.stats import diagnose_kernels

    if starts is None:
        starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
    runs = np.zeros(len(starts), dtype=np.int64)  # trailing_runs of the exact zeros, compiled
    diagnose_kernels.trailing_flagged(
        np.ascontiguousarray(lr, np.float64), np.ascontiguousarray(lt, np.float64), starts, runs
    )
    padded = runs >= PAD_RUN_MIN
    examples = [
        (label, int(step[s]), int(seq[s]), int(r))
        for s, r in zip(starts[padded][:MAX_EXAMPLES], runs[padded][:MAX_EXAMPLES], strict=True)
    ]
    return TrailingZeroState(
        len(starts), int(padded.sum()), int(runs[padded].sum()), n, sorted(examples)
    )
