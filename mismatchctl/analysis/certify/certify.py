"""`certify`: is a selection bitwise (or near-bitwise) equal on both sides?

For setups that promise parity (batch-invariant kernels, deterministic inference, FP16 recipes):
one engine read counts the tokens whose two logprobs are exactly equal and those within
``tolerance`` (``|r| <= tolerance``), the sequences equal throughout, and for every sequence that
diverges its first divergent token (the first, in position order, with ``|r| > tolerance``): the
distribution of those positions, the earliest ones, the first divergence in step order, and the
largest ``|r|``. The criterion holds when no token diverges. Every part's state is a few counts and
k rows (``stats/topk.py``), merged exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.analysis.bins import parse_edges
from mismatchctl.analysis.json_form import JsonForm, Row, member
from mismatchctl.analysis.selection import empty_selection_error, reading, resolve_text
from mismatchctl.columns import arrow_of
from mismatchctl.engines import plan as K
from mismatchctl.engines.choice import LOCAL_ENGINE, Engine
from mismatchctl.engines.keys import PartKeys
from mismatchctl.engines.seqrows import UNKNOWN
from mismatchctl.errors import UsageError
from mismatchctl.parallel import DEFAULT_WORKERS
from mismatchctl.stats.positions import LOG2_EDGES, assign_positions
from mismatchctl.stats.topk import TopRows, top_indices
from mismatchctl.store import Store

EARLIEST = 10  # sequences listed by their first divergent position
EDGES = LOG2_EDGES  # bins of the first divergent position (0, 1, 2-3, 4-7, ...)


@dataclass
class CertifyState:
    """Mergeable counts of one part (or of the merged parts)."""

    tokens: int = 0
    equal: int = 0  # lr == lt exactly
    within: int = 0  # |r| <= tolerance
    sequences: int = 0
    equal_sequences: int = 0  # every token within the tolerance
    first_positions: np.ndarray = field(default_factory=lambda: np.zeros(len(EDGES), np.int64))
    earliest: TopRows = field(default_factory=lambda: TopRows(EARLIEST))  # by first position
    first_in_steps: TopRows = field(default_factory=lambda: TopRows(1))  # by step, seq, position
    max_abs_r: TopRows = field(default_factory=lambda: TopRows(1))

    def merge(self, o: CertifyState) -> CertifyState:
        return CertifyState(
            self.tokens + o.tokens, self.equal + o.equal, self.within + o.within,
            self.sequences + o.sequences, self.equal_sequences + o.equal_sequences,
            self.first_positions + o.first_positions, self.earliest.merge(o.earliest),
            self.first_in_steps.merge(o.first_in_steps), self.max_abs_r.merge(o.max_abs_r),
        )  # fmt: skip


class CertifyExtra:
    """The engine's ``PartExtra`` of ``certify``."""

    columns: tuple[str, ...] = (S.POSITION, S.TOKEN_ID, S.SAMPLE_ID)
    keys: tuple[str, ...] = (K.KV_POSITION,)

    def __init__(self, tolerance: float) -> None:
        self.tolerance = tolerance

    def compute(self, table: pa.Table, keys: PartKeys) -> CertifyState:
        lr, lt = keys.column(S.ROLLOUT), keys.column(S.TRAINER)
        seq, step, pos = keys.column(S.SEQ), keys.column(S.STEP), keys.column(S.POSITION)
        absr = np.abs(lt - lr)
        div = absr > self.tolerance
        starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
        which = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(seq)]))
        hit = np.flatnonzero(div)
        first = hit[np.unique(which[hit], return_index=True)[1]]  # first divergent token per seq
        st = CertifyState(len(lr), int(np.sum(lr == lt)), int(np.sum(~div)), len(starts))
        st.equal_sequences = len(starts) - len(first)
        st.first_positions = np.bincount(
            assign_positions(pos[first], EDGES), minlength=len(EDGES)
        ).astype(np.int64)
        row = _Rows(table, keys, lr, lt)
        k = top_indices(-pos[first].astype(np.float64), (step[first], seq[first]), EARLIEST)
        st.earliest = row.top(EARLIEST, first[k], -pos[first][k].astype(np.float64), with_pos=False)
        k = top_indices(-step[first].astype(np.float64), (seq[first],), 1)
        st.first_in_steps = row.top(1, first[k], -step[first][k].astype(np.float64), by_step=True)
        k = top_indices(absr, (step, seq, pos), 1)
        st.max_abs_r = row.top(1, k, absr[k])
        return st

    def merge(self, a: CertifyState, b: CertifyState) -> CertifyState:
        return a.merge(b)


@dataclass
class _Rows:
    """The payload of listed tokens of one slice."""

    table: pa.Table
    keys: PartKeys
    lr: np.ndarray
    lt: np.ndarray

    def top(
        self, k: int, idx: np.ndarray, scores: np.ndarray, *, with_pos: bool = True,
        by_step: bool = False,
    ) -> TopRows:  # fmt: skip
        keys, out = self.keys, TopRows(k)
        step, seq, pos = keys.column(S.STEP), keys.column(S.SEQ), keys.column(S.POSITION)
        rows = arrow_of(np.asarray(idx, dtype=np.int64))
        samples = self.table.column(S.SAMPLE_ID).take(rows).to_pylist()
        ids = self.table.column(S.TOKEN_ID).take(rows).to_pylist()
        prompt = keys.sequence_rows().prompt_length[keys.rows()[idx]] if len(idx) else []
        for n, i in enumerate(idx.tolist()):
            out.scores.append(float(scores[n]))
            tie: tuple[Any, ...] = (keys.run, int(step[i]), int(seq[i]))
            out.tie.append((keys.run, int(seq[i]), int(pos[i])) if by_step else
                           (*tie, int(pos[i])) if with_pos else tie)  # fmt: skip
            out.rows.append({
                "run": keys.run, "step": int(step[i]), "seq": int(seq[i]),
                "sample_id": samples[n], "turn": int(keys.column(S.TURN)[i]),
                "position": int(pos[i]), "kv_position": None if prompt[n] == UNKNOWN
                else int(prompt[n] + pos[i]), "token_id": ids[n],
                "rollout_logprob": float(self.lr[i]), "trainer_logprob": float(self.lt[i]),
                "log_ratio": float(self.lt[i] - self.lr[i]),
            })  # fmt: skip
        return out


@dataclass(frozen=True)
class DivergentBin(JsonForm):
    """A bin of first divergent positions (``to`` None: the open last bin) and its sequences."""

    lo: int = member(key="from")
    to: int | None = member()
    sequences: int = member()


@dataclass(frozen=True, kw_only=True)
class Certification(JsonForm):
    """Whether a selection is (near-)bitwise equal on both sides, and where it first is not.
    Its JSON is its fields in order, under ``certify``."""

    JSON_ROOT = "certify"

    selector: str
    tolerance: float
    holds: bool  # some token, and every one within the tolerance
    tokens: int
    equal_tokens: int  # lr == lt exactly
    equal_token_share: float | None
    within_tolerance_tokens: int  # |r| <= tolerance
    within_tolerance_share: float | None
    sequences: int
    equal_sequences: int  # every token within the tolerance
    equal_sequence_share: float | None
    first_divergent_position: list[DivergentBin]  # the bins holding a first divergence
    first_divergence: Row | None  # the first in step order (step, seq, position)
    earliest_divergences: list[Row]  # the sequences whose first divergence comes earliest
    max_abs_log_ratio: float | None
    max_abs_log_ratio_at: Row | None

    def to_polars(self) -> Any:
        """The earliest divergences, one row per sequence (by first divergent position)."""
        import polars as pl

        return pl.DataFrame(self.earliest_divergences, infer_schema_length=None)


def certification(selector: str, tolerance: float, s: CertifyState) -> Certification:
    """The certification of a selection from its merged counts."""
    share = _share
    return Certification(
        selector=selector,
        tolerance=tolerance,
        holds=s.tokens > 0 and s.within == s.tokens,
        tokens=s.tokens,
        equal_tokens=s.equal,
        equal_token_share=share(s.equal, s.tokens),
        within_tolerance_tokens=s.within,
        within_tolerance_share=share(s.within, s.tokens),
        sequences=s.sequences,
        equal_sequences=s.equal_sequences,
        equal_sequence_share=share(s.equal_sequences, s.sequences),
        first_divergent_position=_histogram(s.first_positions),
        first_divergence=s.first_in_steps.rows[0] if s.first_in_steps.rows else None,
        earliest_divergences=s.earliest.rows,
        max_abs_log_ratio=s.max_abs_r.scores[0] if s.max_abs_r.scores else None,
        max_abs_log_ratio_at=s.max_abs_r.rows[0] if s.max_abs_r.rows else None,
    )


def _histogram(first_positions: np.ndarray) -> list[DivergentBin]:
    """Every bin holding a sequence's first divergence: its first and last position (None for
    the open bin) and its sequences."""
    out = []
    for k, n in enumerate(first_positions.tolist()):
        if n:
            hi = EDGES[k + 1] - 1 if k + 1 < len(EDGES) else None
            out.append(DivergentBin(EDGES[k], hi, int(n)))
    return out


def _share(n: int, d: int) -> float | None:
    return n / d if d else None


def check_tolerance(tolerance: float) -> None:
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise UsageError(
            f"--tolerance {tolerance}: not a finite number >= 0",
            "give 0 for bitwise equality, or a small |r| such as 1e-6.",
        )


def build_certification(
    store: Store,
    selector: str,
    *,
    tolerance: float = 0.0,
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    engine: Engine = LOCAL_ENGINE,
) -> Certification:
    check_tolerance(tolerance)
    sel = resolve_text(store, selector)
    edges = parse_edges("log")
    extra = CertifyExtra(tolerance)
    with reading(sel):  # `runs rm` meanwhile is no damage, as in every view
        _, states = engine.runner()(sel.tasks, [], edges, sel.rows, workers, on_part, [extra])
    state = states[0] if states[0] is not None else CertifyState()
    if state.tokens == 0:
        raise empty_selection_error(sel)
    return certification(selector, tolerance, state)


__all__ = ["Certification", "build_certification"]
