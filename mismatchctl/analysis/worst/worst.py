"""The worst sequences of a report's HTML page: the sequences with the largest summed K3 of the
selection (``tokens --sequences``), found in the report's own read, each with its tokens read
afterwards (a few row groups per sequence: ``show``) for the page's heat views."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mismatchctl import schema as S
from mismatchctl.analysis.show.show import Show, masked_rows, read_masked, read_tokens, token_rows
from mismatchctl.analysis.tokenizer import run_decoders
from mismatchctl.analysis.tokens.tokens import TopSequencesExtra
from mismatchctl.engines.plan import Selection
from mismatchctl.stats.topk import TopRows

WORST = 10  # sequences listed on the page


class WorstExtra(TopSequencesExtra):
    """The report's ``PartExtra`` of the worst sequences by summed K3 (every token)."""

    def __init__(self) -> None:
        super().__init__(WORST, "k3", [])


@dataclass(frozen=True)
class Worst:
    """The worst sequences (rows of ``tokens --sequences``), the selection's K3 sum, and each
    sequence as a :class:`Show` (its tokens, decoded with its run's tokenizer)."""

    rows: list[dict[str, Any]]
    k3_sum: float
    views: list[Show] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # remembered tokenizers that cannot be read


def worst_sequences(selection: Selection, state: TopRows | None) -> Worst | None:
    """The rows and views of the worst sequences (None without a store to read them from)."""
    if state is None or selection.store is None:
        return None
    store = selection.store
    decoders = run_decoders(store, selection.names, None)
    rows = [{**r, "score": s} for r, s in zip(state.rows, state.scores, strict=True)]
    views = []
    for row in rows:
        tokens = token_rows(read_tokens(store, row["run"], row["seq"]))
        decode = decoders.of(row["run"])
        texts = decode([t["token_id"] for t in tokens])
        for t, text in zip(tokens, texts, strict=True):
            t["text"] = text
        seq = {S.STEP: row["step"], S.SEQ: row["seq"], S.MODEL_TOKENS: row["tokens"],
               S.TURNS: row["turns"]}  # fmt: skip
        first = tokens[0]["position"] if tokens else None
        masked = masked_rows(read_masked(store, row["run"], row["seq"]), decode, first)
        views.append(Show(run=row["run"], sample_id=row["sample_id"], index=0, candidates=1,
                          sequence=seq, tokenizer=decoders.names.get(row["run"]),
                          tokens=tokens, masked=masked))  # fmt: skip
    return Worst(rows, state.total, views, decoders.notes)
