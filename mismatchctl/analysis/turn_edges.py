"""Where the mismatch sits relative to the turn edges: what tells a chat-template or rendering
fault from engine numerics (diagnose's ``turn_edges`` check; docs/explain.md "Template or
numerics").

A rendering fault (the trainer re-renders a tool response a little differently from what the
engine saw) puts the mismatch in the first tokens after each tool response, decaying with the
distance, and leaves the first turns untouched; engine numerics do not care where a turn starts.
Read in the report's pass over every part, two small K3 cubes (``stats/cube/cube.py``): one over the
first turns' tokens, one over the later turns' (after a tool response), each by the distance
from the turn's start, whether the token is among the last ones before a tool response, and the
token-probability bin (the stratum of every rate ratio). Beside them a histogram of |r| by turn
kind, edge and bin gives the share of the largest-|r| tokens that sit at turn starts against the
share expected by chance at the same token probabilities.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.engines import plan as K
from mismatchctl.engines.keys import PartKeys, turn_positions
from mismatchctl.stats.cube.cube import (
    CheckedCodes,
    CheckedTokens,
    Cube,
    check_codes,
    check_tokens,
)
from mismatchctl.stats.cube.spec import CubeSpec, Dim

START = "turn_start"  # the token's distance from its turn's first model token, in classes
END = "turn_end"  # whether the token is among the last EDGE_TOKENS before a tool response
START_EDGES = (0, 1, 2, 4, 8, 16, 64)  # classes 0, 1, 2-3, 4-7, 8-15, 16-63, 64+
EDGE_TOKENS = 8  # "the first few tokens of a turn": distances 0-7 (START classes 0-3)
EDGE_CLASSES = [k for k, lo in enumerate(START_EDGES) if lo < EDGE_TOKENS]
END_LABELS = ("elsewhere", f"last {EDGE_TOKENS} before a tool response")
FINAL = "turn_final"  # the token's distance from its turn's last model token, in classes
FINAL_EDGES = (0, 1, 2, 4, 8)  # classes 0 (the turn's last token), 1, 2-3, 4-7, 8+
SCOPE = "turn_scope"  # whether the turn ends the response or a tool response follows it
SCOPE_LABELS = ("before a tool response", "end of the response")
KINDS = ("first", "later")  # the first turn of a sequence; the turns after a tool response
# |r| histogram: 0, then 8 log-spaced bins per decade from 1e-6 to 1e3, then the overflow
R_EDGES = np.r_[0.0, 10.0 ** np.arange(-6.0, 3.0 + 1e-9, 0.125)]
# the class edges after the first (a class is the count of them <= the distance)
_START_INNER = np.asarray(START_EDGES[1:], dtype=np.int64)
_FINAL_INNER = np.asarray(FINAL_EDGES[1:], dtype=np.int64)


def start_labels(edges: tuple[int, ...] = START_EDGES) -> tuple[str, ...]:
    inner = [f"{a}-{b - 1}" if b - a > 1 else str(a) for a, b in itertools.pairwise(edges)]
    return (*inner, f"{edges[-1]}+")


def final_spec(edges: np.ndarray) -> CubeSpec:
    """Token dimensions only: distance from the turn's last model token, whether the turn ends
    the response, probability bin."""
    bins = tuple(str(k) for k in range(len(edges) - 1))
    return CubeSpec(
        token_dims=(
            Dim(FINAL, len(FINAL_EDGES), start_labels(FINAL_EDGES)),
            Dim(SCOPE, 2, SCOPE_LABELS, ordered=False),
            Dim(K.BIN, len(bins), bins),
        ),
        seq_dims=(),
    )


def edge_spec(edges: np.ndarray) -> CubeSpec:
    """Token dimensions only: distance from the turn start, end of turn, probability bin."""
    bins = tuple(str(k) for k in range(len(edges) - 1))
    return CubeSpec(
        token_dims=(
            Dim(START, len(START_EDGES), start_labels()),
            Dim(END, 2, END_LABELS, ordered=False),
            Dim(K.BIN, len(bins), bins),
        ),
        seq_dims=(),
    )


@dataclass
class EdgeState:
    """The two cubes (first turns, later turns), the |r| histogram, shape (kind, edge, bin,
    |r| bin), and per run the cube of every turn by the distance from its last token
    (``ends``: the turn_ends check judges run by run); merged by addition."""

    cubes: tuple[Cube, Cube]
    hist: np.ndarray
    ends: dict[str, Cube]

    def merge(self, other: EdgeState) -> EdgeState:
        cubes = (self.cubes[0].merge(other.cubes[0]), self.cubes[1].merge(other.cubes[1]))
        ends = dict(self.ends)
        for run, cube in other.ends.items():
            ends[run] = ends[run].merge(cube) if run in ends else cube
        return EdgeState(cubes, self.hist + other.hist, ends)


def edge_codes(seq: np.ndarray, turn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each token's distance from its turn run's start, and whether it is among the last
    ``EDGE_TOKENS`` of a turn run that a later turn of the same sequence follows (the tokens
    right before a tool response)."""
    start, to_end, followed = _turn_runs(seq, turn)
    return start, (to_end < EDGE_TOKENS) & followed


def final_distances(seq: np.ndarray, turn: np.ndarray) -> np.ndarray:
    """Each token's distance from its turn run's last token (0: the last)."""
    return _turn_runs(seq, turn)[1]


def _turn_runs(seq: np.ndarray, turn: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per token: the distance from its turn run's start and from its end, and whether a later
    turn of the same sequence follows the run."""
    n = len(seq)
    start = turn_positions(seq, turn)
    if n == 0:
        return start, start.copy(), np.zeros(0, dtype=bool)
    firsts = np.flatnonzero(start == 0)
    lengths = np.diff(np.r_[firsts, n])
    followed = np.r_[seq[firsts[1:]] == seq[firsts[:-1]], False]
    to_end = np.repeat(lengths, lengths) - 1 - start
    return start, to_end, np.repeat(followed, lengths)


class EdgeExtra:
    """The engine's ``PartExtra`` of the ``turn_edges`` check."""

    columns: tuple[str, ...] = ()

    def __init__(self, edges: np.ndarray) -> None:
        self.spec = edge_spec(edges)
        self.final = final_spec(edges)
        self.nbins = len(edges) - 1

    def compute(self, table: pa.Table, keys: PartKeys) -> EdgeState:
        """The slice's cubes and histogram: its codes, masks and histogram in one compiled
        walk over its turn runs (``stats/edge_kernels.py``), then each cube from the slice as
        it is, masked (no filtered copies)."""
        from mismatchctl.stats import edge_kernels as EK

        lr, lt = keys.column(S.ROLLOUT), keys.column(S.TRAINER)
        seq, turn = keys.column(S.SEQ), keys.column(S.TURN)
        bins = np.asarray(keys.get(K.BIN).codes, dtype=np.int64)
        bins = np.broadcast_to(bins, (keys.n,)) if bins.ndim == 0 else bins
        n = keys.n
        row = np.empty(n, np.int64)
        codes, ends_codes = np.empty((n, 3), np.int32), np.empty((n, 3), np.int32)
        keep = np.empty(n, np.uint8)
        hist = np.zeros(4 * self.nbins * len(R_EDGES))
        EK.edge_pass(
            lr, lt, seq, turn, np.ascontiguousarray(bins), _START_INNER, _FINAL_INNER, R_EDGES,
            EDGE_TOKENS, self.nbins, row, codes, ends_codes, keep, hist,
        )  # fmt: skip
        sequences = int(row[-1]) + 1 if n else 0
        # the cubes' input checks once for the three (they read the same tokens and rows)
        tokens = check_tokens(lr, lt, row, sequences, keep, EK.FIRST | EK.LATER | EK.FINITE)
        starts, finals = check_codes(self.spec, codes), check_codes(self.final, ends_codes)
        k3 = keys.cube_k3()  # once for the three cubes (and the run's cube of the same read)
        cubes = (
            self._cube(tokens, starts, k3, EK.FIRST, self.spec),
            self._cube(tokens, starts, k3, EK.LATER, self.spec),
        )
        ends = self._cube(tokens, finals, k3, EK.FINITE, self.final)
        hist = hist.reshape(2, 2, self.nbins, len(R_EDGES))
        return EdgeState(cubes, hist, {keys.run: ends})

    @staticmethod
    def _cube(
        tokens: CheckedTokens, codes: CheckedCodes, k3: np.ndarray, bit: int, spec: CubeSpec
    ) -> Cube:
        cube = Cube(spec)
        none = np.zeros((tokens.sequences, 0), dtype=np.int32)
        cube.add_checked(tokens, codes, none, bit=bit, k3=k3)
        return cube

    def merge(self, a: EdgeState, b: EdgeState) -> EdgeState:
        return a.merge(b)


@dataclass
class TopShare:
    """Among the ``top`` tokens of largest |r| of one turn kind, how many sit in the first
    ``EDGE_TOKENS`` of their turn, and how many would at the same token probabilities by chance
    (each bin's top tokens spread over it as its tokens are)."""

    top: int
    at_edge: int
    expected: float

    @property
    def enrichment(self) -> float:
        return self.at_edge / self.expected if self.expected > 0 else math.nan


def top_shares(hist: np.ndarray, share: float, least: int) -> dict[str, TopShare]:
    """Per turn kind, the top tokens by |r| of the whole selection: every token at or above the
    highest |r| bin boundary that keeps at least ``share`` of the tokens (and ``least``)."""
    by_r = hist.sum(axis=(0, 1, 2))
    n = by_r.sum()
    need = max(share * n, least)
    tail = np.cumsum(by_r[::-1])[::-1]  # tokens at or above each |r| bin
    cut = int(np.flatnonzero(tail >= need).max()) if n and tail[0] >= need else 0
    out = {}
    for k, kind in enumerate(KINDS):
        top_bins = hist[k, :, :, cut:].sum(axis=2)  # (edge, bin)
        tokens = hist[k].sum(axis=2)
        with np.errstate(invalid="ignore", divide="ignore"):
            p_edge = np.where(tokens.sum(axis=0) > 0, tokens[1] / tokens.sum(axis=0), 0.0)
        expected = float((top_bins.sum(axis=0) * p_edge).sum())
        out[kind] = TopShare(int(top_bins.sum()), int(top_bins[1].sum()), expected)
    return out


__all__ = [
    "EDGE_CLASSES",
    "EDGE_TOKENS",
    "END",
    "FINAL",
    "FINAL_EDGES",
    "KINDS",
    "SCOPE",
    "SCOPE_LABELS",
    "START",
    "EdgeExtra",
    "EdgeState",
    "TopShare",
    "edge_codes",
    "edge_spec",
    "final_distances",
    "final_spec",
    "top_shares",
]
