"""`tokens`: the worst tokens, or the worst sequences, of a selection (or of one cell of it).

One engine read: per slice of whole sequences, the tokens of the cell (``--where``) are scored
and the slice's k best are kept with their payload and ±N tokens of context
(``stats/topk.py``: an exact, mergeable top-k with a total order); parts merge into the k
best of the selection. Memory is k rows per part in flight, whatever the number of tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.analysis.bins import parse_edges
from mismatchctl.analysis.json_form import NONE, JsonForm, Row, member
from mismatchctl.analysis.selection import reading, resolve_text
from mismatchctl.analysis.tokenizer import RunDecoders, run_decoders
from mismatchctl.analysis.tokens.text import context_text
from mismatchctl.analysis.where import Condition, cell_mask, parse_where, where_keys
from mismatchctl.columns import arrow_of, numpy_of
from mismatchctl.engines import plan as K
from mismatchctl.engines.choice import LOCAL_ENGINE, Engine
from mismatchctl.engines.keys import PartKeys
from mismatchctl.engines.seqrows import UNKNOWN
from mismatchctl.errors import UsageError
from mismatchctl.parallel import DEFAULT_WORKERS
from mismatchctl.stats import registry as M
from mismatchctl.stats.per_token import k3 as token_k3
from mismatchctl.stats.topk import TopRows, top_indices
from mismatchctl.store import Store

TOKEN_SORTS = ("k3", "abs-r", "prob-diff")
SEQUENCE_SORTS = ("k3", "chi2", "abs-sum-r")
CHI2_CLAMP = 20.0  # chi2_seq clamps the summed log-ratio at +-20 (docs/metrics.md)
MAX_TOP = 100_000
TOKENS, SEQUENCES = "tokens", "sequences"  # the two listings, and the JSON keys of their rows
MAX_CONTEXT = 256


def token_scores(lr: np.ndarray, lt: np.ndarray, sort: str) -> tuple[np.ndarray, np.ndarray]:
    """Each token's score for ``sort`` and its K3 (``rho - 1 - r``; +inf beyond float64)."""
    r = lt - lr
    k3 = token_k3(r)
    if sort == "k3":
        return k3, k3
    if sort == "abs-r":
        return np.abs(r), k3
    return np.abs(np.exp(lt) - np.exp(lr)), k3


def sequence_score(k3: np.ndarray, sum_r: np.ndarray, sort: str) -> np.ndarray:
    """Per sequence: summed K3, chi2 (``exp(2 clamp(sum r, -20, 20)) - 1``) or |sum r|."""
    if sort == "k3":
        return k3
    if sort == "chi2":
        return np.expm1(2.0 * np.clip(sum_r, -CHI2_CLAMP, CHI2_CLAMP))
    return np.abs(sum_r)


def _spans(seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive) row of each token's sequence in the slice."""
    n = len(seq)
    starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]]) if n else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], n]
    which = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, n]))
    return starts[which], ends[which]


def _kv(keys: PartKeys, rows: np.ndarray, position: np.ndarray) -> list[int | None]:
    """KV positions (position + prompt length) of some rows; None where the dump gave none."""
    prompt = keys.sequence_rows().prompt_length[keys.rows()[rows]]
    return [None if p == UNKNOWN else int(p + q) for p, q in zip(prompt, position, strict=True)]


@dataclass
class _Columns:
    """The slice's columns the listings read (numpy; strings read at the kept rows only)."""

    table: pa.Table
    step: np.ndarray
    seq: np.ndarray
    turn: np.ndarray
    position: np.ndarray
    token: np.ndarray | None  # None: no token ids in the part (all null)
    lr: np.ndarray
    lt: np.ndarray

    @classmethod
    def of(cls, table: pa.Table, keys: PartKeys) -> _Columns:
        tok = table.column(S.TOKEN_ID) if S.TOKEN_ID in table.column_names else None
        token = None if tok is None or tok.null_count == len(tok) else numpy_of(tok, fill=-1)
        return cls(
            table, keys.column(S.STEP), keys.column(S.SEQ), keys.column(S.TURN),
            keys.column(S.POSITION), token, keys.column(S.ROLLOUT), keys.column(S.TRAINER),
        )  # fmt: skip

    def sample_ids(self, rows: np.ndarray) -> list[str]:
        return self.table.column(S.SAMPLE_ID).take(arrow_of(np.asarray(rows, np.int64))).to_pylist()

    def token_id(self, i: int) -> int | None:
        if self.token is None or self.token[i] < 0:
            return None
        return int(self.token[i])

    def context(self, rows: range) -> dict[str, list[int | None]]:
        return {
            "positions": [int(self.position[j]) for j in rows],
            "ids": [self.token_id(j) for j in rows],
        }


class TopTokensExtra:
    """The engine's ``PartExtra``: the k best tokens of every part (``TopRows``)."""

    columns: tuple[str, ...] = (S.POSITION, S.TOKEN_ID, S.SAMPLE_ID)

    def __init__(self, k: int, sort: str, where: Sequence[Condition], context: int) -> None:
        self.k, self.sort, self.where, self.context = k, sort, list(where), context
        self.keys: tuple[str, ...] = (K.KV_POSITION, *where_keys(where))

    def compute(self, table: pa.Table, keys: PartKeys) -> TopRows:
        c = _Columns.of(table, keys)
        score, k3 = token_scores(c.lr, c.lt, self.sort)
        mask = cell_mask(self.where, keys)
        inside = np.arange(keys.n) if mask is None else np.flatnonzero(mask)
        top = inside[top_indices(score[inside], (c.seq[inside], c.position[inside]), self.k)]
        lo, hi = _spans(c.seq)
        kv = _kv(keys, top, c.position[top])
        samples = c.sample_ids(top)
        out = TopRows(self.k, seen=len(inside), tokens=len(inside), total=float(np.sum(k3[inside])))
        for n, i in enumerate(top.tolist()):
            out.scores.append(float(score[i]))
            out.tie.append((keys.run, int(c.step[i]), int(c.seq[i]), int(c.position[i])))
            out.rows.append(self._row(c, keys.run, i, samples[n], kv[n], k3[i], (lo[i], hi[i])))
        return out

    def _row(
        self, c: _Columns, run: str, i: int, sample: str, kv: int | None, k3: float,
        span: tuple[int, int],
    ) -> dict[str, Any]:  # fmt: skip
        n = self.context
        return {
            "run": run, "step": int(c.step[i]), "seq": int(c.seq[i]), "sample_id": sample,
            "turn": int(c.turn[i]), "position": int(c.position[i]), "kv_position": kv,
            "token_id": c.token_id(i), "rollout_logprob": float(c.lr[i]),
            "trainer_logprob": float(c.lt[i]), "p_rollout": float(np.exp(c.lr[i])),
            "p_trainer": float(np.exp(c.lt[i])), "log_ratio": float(c.lt[i] - c.lr[i]),
            "k3": float(k3),
            "before": c.context(range(max(int(span[0]), i - n), i)),
            "after": c.context(range(i + 1, min(int(span[1]), i + 1 + n))),
        }  # fmt: skip

    def merge(self, a: TopRows, b: TopRows) -> TopRows:
        return a.merge(b)


class TopSequencesExtra:
    """The engine's ``PartExtra``: the k best sequences of every part, by their sums over the
    tokens of the cell (a sequence never spans two parts nor two slices, so its sums are
    whole)."""

    columns: tuple[str, ...] = (S.POSITION, S.SAMPLE_ID)

    def __init__(self, k: int, sort: str, where: Sequence[Condition]) -> None:
        self.k, self.sort, self.where = k, sort, list(where)
        self.keys: tuple[str, ...] = where_keys(where)

    def compute(self, table: pa.Table, keys: PartKeys) -> TopRows:
        c = _Columns.of(table, keys)
        _, k3 = token_scores(c.lr, c.lt, "k3")
        mask = cell_mask(self.where, keys)
        inside = np.arange(keys.n) if mask is None else np.flatnonzero(mask)
        out = TopRows(self.k, tokens=len(inside), total=float(np.sum(k3[inside])))
        if len(inside) == 0:
            return out
        seq = c.seq[inside]
        starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
        sums = _sequence_sums(c, inside, starts, k3)
        score = sequence_score(sums["k3_sum"], sums["log_ratio_sum"], self.sort)
        first = inside[starts]
        top = top_indices(score, (c.step[first], c.seq[first]), self.k)
        samples = c.sample_ids(first[top])
        out.seen = len(starts)
        for n, j in enumerate(top.tolist()):
            i = int(first[j])
            out.scores.append(float(score[j]))
            out.tie.append((keys.run, int(c.step[i]), int(c.seq[i])))
            row = {"run": keys.run, "step": int(c.step[i]), "seq": int(c.seq[i])}
            row["sample_id"] = samples[n]
            row.update({name: _scalar(v[j]) for name, v in sums.items()})
            out.rows.append(row)
        return out

    def merge(self, a: TopRows, b: TopRows) -> TopRows:
        return a.merge(b)


def _scalar(v: Any) -> Any:
    return int(v) if isinstance(v, np.integer) else float(v)


def _sequence_sums(
    c: _Columns, inside: np.ndarray, starts: np.ndarray, k3: np.ndarray
) -> dict[str, np.ndarray]:
    """Per sequence of the cell: tokens, turns, sum K3, sum r, chi2, max |r| and where it is."""
    r = (c.lt - c.lr)[inside]
    add = np.add.reduceat
    tokens = np.diff(np.r_[starts, len(inside)])
    turn = c.turn[inside]
    new_turn = np.r_[True, turn[1:] != turn[:-1]]
    new_turn[starts] = True
    absr = np.abs(r)
    which = np.repeat(np.arange(len(starts)), tokens)
    hit = np.flatnonzero(absr == np.maximum.reduceat(absr, starts)[which])
    worst = hit[np.unique(which[hit], return_index=True)[1]]  # the first token at the max
    sum_r = add(r, starts)
    return {
        "tokens": tokens,
        "turns": add(new_turn.astype(np.int64), starts),
        "k3_sum": add(k3[inside], starts),
        "log_ratio_sum": sum_r,
        "chi2": sequence_score(np.zeros(0), sum_r, "chi2"),
        M.ABS_LOG_RATIO_MAX: absr[worst],
        "worst_position": c.position[inside][worst],
    }


@dataclass(frozen=True, kw_only=True)
class Tokens(JsonForm):
    """The worst tokens (or sequences, ``listing`` ``sequences``) of a selection's cell, best
    first. Its JSON is its fields in order, under ``tokens``; the rows are written under the
    listing's name."""

    JSON_ROOT = "tokens"

    selector: str
    where: list[str]
    sort: str
    top: int
    listing: str  # TOKENS or SEQUENCES
    context: int
    cell_tokens: int  # tokens of the cell (the whole selection without --where)
    cell_k3_sum: float
    tokenizers: dict[str, str]  # run -> the tokenizer decoding it
    notes: list[str]
    cell_sequences: int | None = member(omit=NONE)  # with a token in the cell (sequences only)
    token_rows: list[Row] | None = member(key=TOKENS, omit=NONE)
    sequence_rows: list[Row] | None = member(key=SEQUENCES, omit=NONE)

    @property
    def sequences(self) -> bool:
        """The listing is of sequences (``tokens --sequences``)."""
        return self.listing == SEQUENCES

    @property
    def rows(self) -> list[Row]:
        """The listed tokens or sequences, best first."""
        return (self.sequence_rows if self.sequences else self.token_rows) or []

    def to_polars(self) -> Any:
        """One row per listed token (or sequence), best first; a token's context as lists."""
        import polars as pl

        flat = []
        for r in self.rows:
            row = {k: v for k, v in r.items() if k not in ("before", "after")}
            for side in ("before", "after") if "before" in r else ():
                row[f"{side}_positions"] = r[side]["positions"]
                row[f"{side}_ids"] = r[side]["ids"]
            flat.append(row)
        return pl.DataFrame(flat, infer_schema_length=None)


def check_options(top: int, sort: str, sequences: bool, context: int) -> None:
    sorts = SEQUENCE_SORTS if sequences else TOKEN_SORTS
    if sort not in sorts:
        what = "sequences" if sequences else "tokens"
        raise UsageError(
            f"--sort {sort}: not an order of {what}",
            f"the {what} sort by {', '.join(sorts)}"
            + ("" if sequences else " (with --sequences: k3, chi2, abs-sum-r)")
            + ".",
        )
    if not 1 <= top <= MAX_TOP:
        raise UsageError(f"--top {top}: out of range", f"give 1 to {MAX_TOP:,}.")
    if not 0 <= context <= MAX_CONTEXT:
        raise UsageError(f"--context {context}: out of range", f"give 0 to {MAX_CONTEXT}.")


def build_tokens(
    store: Store,
    selector: str,
    *,
    top: int = 20,
    sort: str = "k3",
    sequences: bool = False,
    where: Sequence[str] = (),
    context: int = 5,
    tokenizer: str | None = None,
    bins: str = "log",
    workers: int = DEFAULT_WORKERS,
    on_part: Callable[[int], None] | None = None,
    engine: Engine = LOCAL_ENGINE,
) -> Tokens:
    check_options(top, sort, sequences, context)
    edges = parse_edges(bins)
    conditions = parse_where(where, edges)
    sel = resolve_text(store, selector)
    decoders = run_decoders(store, sel.names, tokenizer)
    extra: TopTokensExtra | TopSequencesExtra = (
        TopSequencesExtra(top, sort, conditions)
        if sequences
        else TopTokensExtra(top, sort, conditions, context)
    )
    with reading(sel):  # `runs rm` meanwhile is no damage, as in every view
        _, states = engine.runner()(sel.tasks, [], edges, sel.rows, workers, on_part, [extra])
    state: TopRows = states[0] if states[0] is not None else TopRows(top)
    rows = [{**row, "score": s} for row, s in zip(state.rows, state.scores, strict=True)]
    if not rows:
        raise _empty_cell(selector, conditions)
    for row in rows if not sequences else ():
        add_text(row, decoders)
    return Tokens(
        selector=selector,
        where=[str(c) for c in conditions],
        sort=sort,
        top=top,
        listing=SEQUENCES if sequences else TOKENS,
        context=context,
        cell_tokens=state.tokens,
        cell_k3_sum=state.total,
        tokenizers=decoders.names,
        notes=decoders.notes,
        cell_sequences=state.seen if sequences else None,
        token_rows=None if sequences else rows,
        sequence_rows=rows if sequences else None,
    )


def add_text(row: dict[str, Any], decoders: RunDecoders) -> None:
    """The token's text and its context line, with its run's tokenizer (ids without one:
    separated by spaces; decoded text: joined as it is)."""
    decode = decoders.of(row["run"])
    row["token_text"] = decode([row["token_id"]])[0]
    row["context"] = context_text(row, decode, "" if row["run"] in decoders.decoders else " ")


def _empty_cell(selector: str, conditions: Sequence[Condition]) -> UsageError:
    where = " ".join(f"--where {c}" for c in conditions)
    return UsageError(
        f"no token of `{selector}` is in the cell {where}",
        "check the values with `mismatchctl report SELECTION --by KEY` (KEY: the key of "
        "--where); data keys (run, step, gpu, tags, attributes) match their values exactly.",
    )


__all__ = ["SEQUENCE_SORTS", "TOKEN_SORTS", "Tokens", "build_tokens"]
