"""Which kinds of tokens the worst tokens are (diagnose's ``token_classes`` check, with a
tokenizer): byte-fallback pieces, special tokens, whitespace-only tokens, or other tokens.

A rendering or tokenization fault (the trainer re-tokenizes the text instead of taking the
engine's ids, normalizes whitespace, splits or drops a special token, decodes a byte-fallback
piece another way) scores those tokens in another context than the engine sampled them in: the
largest |r| cluster on them. Engine numerics do not care which token it is.

Every id of the run's tokenizer (remembered per run by ``tokens --tokenizer``) gets a class once
(``class_table``): *special* when the tokenizer's added tokens mark it special; *byte* when it is
a byte-fallback piece (``<0xNN>``, SentencePiece) or decodes alone to an incomplete UTF-8
character (a byte-level BPE piece of a multi-byte character: U+FFFD); *whitespace* when it
decodes to whitespace only; *other* otherwise. With ``bytes`` (ids are bytes): bytes 128-255
are *byte* pieces, tab, newline, vertical tab, form feed, carriage return and space are
*whitespace*.

Read in diagnose's pass (``TokenClassExtra``): per (class, probability bin) the count of model
tokens, and the largest-|r| tokens of the selection (an exact mergeable top-k,
``stats/topk.py``, by |r| with the store's tie order), with their class, bin and id. The check
compares each class's count among the worst with what chance puts there at the same token
probabilities: ``sum over bins of (worst tokens in the bin) x (the class's share of the bin's
tokens)``, with the binomial variance of that sum (thresholds in
``diagnose/checks/token_classes.py``). Tokens without an id, or whose id the vocabulary does not
hold, are not classified (counted).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.analysis.tokenizer import HFDecoder, RunDecoders, byte_text
from mismatchctl.analysis.tokens.text import Decoder
from mismatchctl.columns import numpy_of
from mismatchctl.engines import plan as K
from mismatchctl.engines.keys import PartKeys
from mismatchctl.stats.topk import TopRows, top_indices

CLASSES = ("byte", "special", "whitespace", "other")
BYTE, SPECIAL, WHITESPACE, OTHER = range(4)
UNCLASSIFIED = len(CLASSES)  # no id, or an id outside the vocabulary
BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")
WHITESPACE_BYTES = (9, 10, 11, 12, 13, 32)


def class_table(decoder: Decoder) -> np.ndarray | None:
    """The class of every id of a run's tokenizer (int8, indexed by id); None for a decoder
    that is not a tokenizer (ids shown as numbers)."""
    if decoder is byte_text:
        out = np.full(256, OTHER, dtype=np.int8)
        out[128:] = BYTE
        out[list(WHITESPACE_BYTES)] = WHITESPACE
        return out
    if not isinstance(decoder, HFDecoder):
        return None
    tok, size = decoder.tokenizer, decoder.size
    pieces = tok.decode_batch([[i] for i in range(size)], skip_special_tokens=False)
    out = np.full(size, OTHER, dtype=np.int8)
    for i, text in enumerate(pieces):
        name = tok.id_to_token(i) or ""
        if BYTE_PIECE.fullmatch(name) or "\ufffd" in text:
            out[i] = BYTE
        elif text and text.isspace():
            out[i] = WHITESPACE
    special = [i for i, t in tok.get_added_tokens_decoder().items() if t.special and i < size]
    out[special] = SPECIAL
    return out


def class_tables(decoders: RunDecoders) -> dict[str, np.ndarray]:
    """Each run's class table (runs sharing a tokenizer share one)."""
    made: dict[str, np.ndarray | None] = {}
    out = {}
    for run, decoder in decoders.decoders.items():
        name = decoders.names.get(run, run)
        if name not in made:
            made[name] = class_table(decoder)
        table = made[name]
        if table is not None:
            out[run] = table
    return out


@dataclass
class ClassState:
    """Model tokens per (class, probability bin) (the last class row: unclassified), the
    largest-|r| classified tokens, and the model tokens of runs without a class table."""

    counts: np.ndarray
    top: TopRows
    without: int = 0

    def merge(self, other: ClassState) -> ClassState:
        return ClassState(
            self.counts + other.counts, self.top.merge(other.top), self.without + other.without
        )


class TokenClassExtra:
    """The engine's ``PartExtra`` of the ``token_classes`` check."""

    columns: tuple[str, ...] = (S.POSITION, S.TOKEN_ID)
    keys: tuple[str, ...] = (K.BIN,)

    def __init__(self, tables: dict[str, np.ndarray], edges: np.ndarray, k: int) -> None:
        self.tables, self.nbins, self.k = tables, len(edges) - 1, k

    def compute(self, table: pa.Table, keys: PartKeys) -> ClassState:
        counts = np.zeros((UNCLASSIFIED + 1, self.nbins), dtype=np.int64)
        lut = self.tables.get(keys.run)
        if lut is None:
            return ClassState(counts, TopRows(self.k), keys.n)
        ids = numpy_of(table.column(S.TOKEN_ID), fill=-1).astype(np.int64)
        known = (ids >= 0) & (ids < len(lut))
        cls = np.where(known, lut[np.where(known, ids, 0)], UNCLASSIFIED).astype(np.int64)
        bins = np.broadcast_to(np.asarray(keys.get(K.BIN).codes, dtype=np.int64), (keys.n,))
        counts += np.bincount(cls * self.nbins + bins, minlength=counts.size).reshape(counts.shape)
        r = keys.column(S.TRAINER) - keys.column(S.ROLLOUT)
        seq, step, position = keys.column(S.SEQ), keys.column(S.STEP), keys.column(S.POSITION)
        inside = np.flatnonzero(known)
        best = inside[top_indices(np.abs(r[inside]), (seq[inside], position[inside]), self.k)]
        top = TopRows(self.k, seen=len(inside))
        for i in best.tolist():
            top.scores.append(float(abs(r[i])))
            top.tie.append((keys.run, int(step[i]), int(seq[i]), int(position[i])))
            top.rows.append({
                "run": keys.run, "step": int(step[i]), "seq": int(seq[i]),
                "position": int(position[i]), "token_id": int(ids[i]), "class": int(cls[i]),
                "bin": int(bins[i]), "log_ratio": float(r[i]),
            })  # fmt: skip
        return ClassState(counts, top)

    def merge(self, a: ClassState, b: ClassState) -> ClassState:
        return a.merge(b)


def top_size(tokens: int, share: float, least: int, most: int) -> int:
    """How many worst tokens are classified: ``share`` of the selection's model tokens, at
    least ``least`` and at most ``most``."""
    return int(min(max(round(share * tokens), least), most))


@dataclass
class ClassFinding:
    """One class among the worst tokens: how many there are, how many chance puts there at the
    same token probabilities (and its standard error), its share of all classified tokens."""

    name: str
    worst: int
    expected: float
    se: float
    share_worst: float
    share_all: float
    examples: list[tuple[str, int]] = field(default_factory=list)  # (text, count), most first

    @property
    def enrichment(self) -> float:
        return self.worst / self.expected if self.expected > 0 else float("inf")

    @property
    def z(self) -> float:
        excess = self.worst - self.expected
        if self.se > 0:
            return excess / self.se
        return float("inf") if excess > 0 else 0.0


@dataclass
class ClassSummary:
    """The check's numbers: the worst tokens classified, each class's finding, the tokens not
    classified and those of runs without a tokenizer."""

    top: int
    classes: list[ClassFinding]
    tokens: int  # classified model tokens
    unclassified: int
    without_tokenizer: int
    rows: list[dict[str, Any]] = field(default_factory=list)


def summarize(state: ClassState, decoders: RunDecoders) -> ClassSummary:
    """Each class's count among the worst tokens against chance at the same token
    probabilities (the bins), with examples decoded by the runs' tokenizers."""
    counts = state.counts[:UNCLASSIFIED].astype(np.float64)  # (class, bin)
    rows = state.top.rows
    per_bin = counts.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(per_bin > 0, counts / per_bin, 0.0)  # the class's share of each bin
    top_bins = np.bincount([r["bin"] for r in rows], minlength=counts.shape[1]).astype(float)
    total = counts.sum()
    findings = []
    for c, name in enumerate(CLASSES[:OTHER]):
        mine = [r for r in rows if r["class"] == c]
        expected = float(top_bins @ p[c])
        se = float(np.sqrt(top_bins @ (p[c] * (1 - p[c]))))
        findings.append(ClassFinding(
            name, len(mine), expected, se, len(mine) / len(rows) if rows else 0.0,
            float(counts[c].sum() / total) if total else 0.0, _examples(mine, decoders),
        ))  # fmt: skip
    return ClassSummary(
        len(rows), findings, int(total), int(state.counts[UNCLASSIFIED].sum()), state.without,
        rows,
    )  # fmt: skip


def _examples(rows: list[dict[str, Any]], decoders: RunDecoders, n: int = 3) -> list:
    """The most frequent tokens of a class among the worst, as text (ties: the first met)."""
    texts = [decoders.of(r["run"])([r["token_id"]])[0] for r in rows]
    return [(t, k) for t, k in Counter(texts).most_common(n)]


__all__ = [
    "CLASSES",
    "ClassState",
    "ClassSummary",
    "TokenClassExtra",
    "class_table",
    "class_tables",
    "summarize",
    "top_size",
]
