"""`show`: one sequence, token by token, with each token's logprobs, r and K3.

The sequence is found by its sample id in the run's sequence rows (one small read, filtered on
the sample id); its tokens are read from the token parts whose ``seq`` range (catalog) holds it,
and in each only the row groups whose ``seq`` statistics hold it: a few row groups, whatever the
store's size. When several sequences share the sample id (verl's ``uid`` names a prompt group),
``--step`` narrows them and ``--index`` picks one; otherwise the error lists them.

The token ids of its tool responses (the masked positions between model tokens) are read the
same way from the run's ``masked/`` parts, when ingest kept them (``--keep-masked``, the
default, and a dump with token ids); without them a tool response is a gap with its length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl import schema as S
from mismatchctl.analysis.json_form import JsonForm, Row
from mismatchctl.analysis.routing.kinds import first_flip_layer, paired_kind
from mismatchctl.analysis.tokenizer import run_decoders
from mismatchctl.analysis.tokens.text import Decoder
from mismatchctl.errors import StoreError, UsageError
from mismatchctl.stats.per_token import k3 as token_k3
from mismatchctl.store import Store
from mismatchctl.store.integrity import read_error
from mismatchctl.store.parts import MASKED, ROUTING, SEQUENCES, TOKENS, twin_path

SEQ_COLUMNS = (S.STEP, S.SEQ, S.SAMPLE_ID, S.MODEL_TOKENS, S.TURNS, S.PROMPT_TOKENS,
               S.TOOL_TOKENS, S.PAD_TOKENS)  # fmt: skip
TOKEN_COLUMNS = (S.SEQ, S.TURN, S.POSITION, S.TOKEN_ID, S.ROLLOUT, S.TRAINER)
MASKED_COLUMNS = (S.SEQ, S.POSITION, S.TOKEN_ID)
MAX_LISTED = 20


@dataclass(frozen=True, kw_only=True)
class Show(JsonForm):
    """One sequence: its sequence row, and every model token in position order. Its JSON is
    its fields in order, under ``show``."""

    JSON_ROOT = "show"

    run: str
    sample_id: str
    index: int  # among the sequences with this sample id (and step)
    candidates: int
    sequence: Row  # the sequence row (step, seq, model_tokens, turns, ...)
    tokenizer: str | None = None
    notes: list[str] = field(default_factory=list)
    tokens: list[Row] = field(default_factory=list)
    # the tool responses' tokens (position, token_id, text), when ingest kept them
    masked: list[Row] = field(default_factory=list)

    def to_polars(self) -> Any:
        """One row per model token, in position order."""
        import polars as pl

        return pl.DataFrame(self.tokens, infer_schema_length=None)


# `show` is a start-up cost: it reads with ParquetFile and matches values in Python, because
# pyarrow's datasets (read_table), its scalars from Python values and to_numpy load pandas
# (about as long as the rest of the command) when it is installed.


def find_sequences(store: Store, run: str, sample_id: str, step: int | None) -> list[dict]:
    """The sequence rows of ``run`` with this sample id (and step), by step then seq."""
    rows: list[dict] = []
    for part in store.parts(run, SEQUENCES):
        path = str(store.part_path(part))
        try:
            table = pq.ParquetFile(path).read(columns=list(SEQ_COLUMNS))
        except (OSError, pa.ArrowException) as exc:
            raise read_error(run, path, exc) from None
        ids, steps = table.column(S.SAMPLE_ID).to_pylist(), table.column(S.STEP).to_pylist()
        rows += [
            table.slice(i, 1).to_pylist()[0]
            for i, found in enumerate(ids)
            if found == sample_id and (step is None or steps[i] == step)
        ]
    return sorted(rows, key=lambda r: (r[S.STEP], r[S.SEQ]))


def choose(rows: list[dict], run: str, sample_id: str, step: int | None, index: int | None) -> int:
    """The index of the sequence to show, or an error saying which exist."""
    where = f"run `{run}`" + (f" at step {step}" if step is not None else "")
    if not rows:
        raise StoreError(
            f"no sequence with sample id `{sample_id}` in {where}",
            "`mismatchctl tokens RUN --sequences` lists sample ids (the worst sequences); "
            "`--step` must be a step that sequence is in.",
        )
    if index is None and len(rows) == 1:
        return 0
    listed = "; ".join(
        f"{i}: step {r[S.STEP]}, seq {r[S.SEQ]}, {r[S.MODEL_TOKENS]} tokens"
        for i, r in enumerate(rows[:MAX_LISTED])
    ) + ("; ..." if len(rows) > MAX_LISTED else "")
    if index is None:
        raise UsageError(
            f"{len(rows)} sequences of {where} have the sample id `{sample_id}` ({listed})",
            "pick one with --index I (and narrow with --step N).",
        )
    if not 0 <= index < len(rows):
        raise UsageError(
            f"--index {index}: {len(rows)} sequences of {where} have the sample id "
            f"`{sample_id}` ({listed})",
            f"give an index from 0 to {len(rows) - 1}.",
        )
    return index


def read_tokens(store: Store, run: str, seq: int) -> pa.Table:
    """The sequence's token rows: parts whose seq range holds it, and in each the row groups
    whose ``seq`` statistics do (a sequence is never split across parts); with the
    ``route_paired`` of each token when the part has a routing twin (MoE routes)."""
    found = _read_sequence(store, run, seq, TOKENS, TOKEN_COLUMNS)
    if found is None:
        return _empty(TOKEN_COLUMNS)
    path, table = found
    return _with_routes(store, run, path, seq, table)


def read_masked(store: Store, run: str, seq: int) -> pa.Table:
    """The sequence's masked rows (its tool responses' token ids), read like its tokens; none
    when ingest did not keep them."""
    found = _read_sequence(store, run, seq, MASKED, MASKED_COLUMNS)
    if found is None:
        return _empty(MASKED_COLUMNS)
    return found[1]


def _empty(columns: tuple[str, ...]) -> pa.Table:
    """No rows of these columns (``empty_table`` and arrays from Python lists load pandas)."""
    return pa.Table.from_batches([], pa.schema([(c, pa.int64()) for c in columns]))


def _read_sequence(
    store: Store, run: str, seq: int, kind: str, columns: tuple[str, ...]
) -> tuple[str, pa.Table] | None:
    """The part (its path) holding the sequence's rows of this kind, and those rows."""
    for part in store.parts(run, kind):
        if part.min_seq is not None and not part.min_seq <= seq <= (part.max_seq or seq):
            continue
        path = str(store.part_path(part))
        try:
            table = _read_part(pq.ParquetFile(path), seq, columns)
        except (OSError, pa.ArrowException) as exc:
            raise read_error(run, path, exc) from None
        if table is not None and table.num_rows:
            return path, table
    return None


def _with_routes(store: Store, run: str, path: str, seq: int, table: pa.Table) -> pa.Table:
    """The tokens with their ``route_paired`` from the part's twin, when it has one."""
    twin = twin_path(path)
    if twin not in {str(store.part_path(p)) for p in store.parts(run, ROUTING)}:
        return table
    try:
        rows = _read_part(pq.ParquetFile(twin), seq, (S.SEQ, S.POSITION, S.ROUTE_PAIRED))
    except (OSError, pa.ArrowException) as exc:
        raise read_error(run, twin, exc) from None
    if rows is None or not rows.column(S.POSITION).equals(table.column(S.POSITION)):
        raise StoreError(
            f"run `{run}`: routing part {twin} does not match its token part {path}",
            "run `mismatchctl runs check`; re-ingest the run if a part is damaged.",
        )
    return table.append_column(S.ROUTE_PAIRED, rows.column(S.ROUTE_PAIRED))


def _read_part(pf: pq.ParquetFile, seq: int, columns: tuple[str, ...]) -> pa.Table | None:
    meta = pf.metadata
    col = [meta.schema.column(i).name for i in range(meta.num_columns)].index(S.SEQ)
    groups = []
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(col).statistics
        if stats is None or not stats.has_min_max or stats.min <= seq <= stats.max:
            groups.append(i)
    if not groups:
        return None
    table = pf.read_row_groups(groups, columns=list(columns))
    found = np.flatnonzero(_values(table.column(S.SEQ), np.int64) == seq)
    if not len(found):
        return None
    first, n = int(found[0]), len(found)
    if found[-1] - first + 1 == n:  # as ingest writes them: one run of rows, by position
        rows = table.slice(first, n)
        if n < 2 or bool(np.all(np.diff(_values(rows.column(S.POSITION), np.int64)) > 0)):
            return rows
    import pyarrow.compute as pc  # only for rows out of order: it costs 0.1 s to load

    col = table.column(S.SEQ)
    return table.filter(pc.equal(col, col[first])).sort_by(S.POSITION)


def _values(col: pa.ChunkedArray, dtype: type) -> np.ndarray:
    """A column of numbers as numpy, from its buffers when it is of ``dtype`` without nulls
    (``to_numpy`` would load pandas), else from its Python values."""
    if col.null_count or col.type != pa.from_numpy_dtype(dtype):
        return np.array(col.to_pylist(), dtype=dtype)
    size = np.dtype(dtype).itemsize
    parts = [np.frombuffer(c.buffers()[1], dtype, len(c), c.offset * size) for c in col.chunks]
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def token_rows(table: pa.Table) -> list[dict[str, Any]]:
    """One dict per token; with routes, its producing position's ``routing`` (flipped, same,
    unpaired) and ``first_flip_layer`` (docs/metrics.md, Routing)."""
    lr = _values(table.column(S.ROLLOUT), np.float64)
    lt = _values(table.column(S.TRAINER), np.float64)
    r = lt - lr
    k3 = token_k3(r)
    ids = table.column(S.TOKEN_ID).to_pylist()
    out = []
    for j, (pos, turn) in enumerate(
        zip(table.column(S.POSITION).to_pylist(), table.column(S.TURN).to_pylist(), strict=True)
    ):
        out.append({
            "position": pos, "turn": turn, "token_id": ids[j],
            "rollout_logprob": float(lr[j]), "trainer_logprob": float(lt[j]),
            "p_rollout": float(np.exp(lr[j])), "p_trainer": float(np.exp(lt[j])),
            "log_ratio": float(r[j]), "k3": float(k3[j]),
        })  # fmt: skip
    if S.ROUTE_PAIRED in table.column_names:
        for t, paired in zip(out, table.column(S.ROUTE_PAIRED).to_pylist(), strict=True):
            t["routing"], t["first_flip_layer"] = paired_kind(paired), first_flip_layer(paired)
    return out


def build_show(
    store: Store,
    run: str,
    sample_id: str,
    *,
    step: int | None = None,
    index: int | None = None,
    tokenizer: str | None = None,
) -> Show:
    store.run(run)  # an unknown run: named, with the runs there are
    rows = find_sequences(store, run, sample_id, step)
    k = choose(rows, run, sample_id, step, index)
    decoders = run_decoders(store, [run], tokenizer)
    tokens = token_rows(read_tokens(store, run, int(rows[k][S.SEQ])))
    decode = decoders.of(run)
    texts = decode([t["token_id"] for t in tokens])
    for t, text in zip(tokens, texts, strict=True):
        t["text"] = text
    first = tokens[0]["position"] if tokens else None
    return Show(
        run=run,
        sample_id=sample_id,
        index=k,
        candidates=len(rows),
        sequence=rows[k],
        tokens=tokens,
        tokenizer=decoders.names.get(run),
        notes=decoders.notes,
        masked=masked_rows(read_masked(store, run, int(rows[k][S.SEQ])), decode, first),
    )


def masked_rows(table: pa.Table, decode: Decoder, first: int | None) -> list[dict[str, Any]]:
    """The tool responses' tokens (the masked rows after the first model token, at ``first``;
    those before are the prompt's) in position order: position, token id, text."""
    if not table.num_rows or first is None:
        return []
    rows = sorted(zip(table.column(S.POSITION).to_pylist(), table.column(S.TOKEN_ID).to_pylist(),
                      strict=True))  # fmt: skip
    rows = [(p, i) for p, i in rows if p > first]
    ids = [i for _, i in rows]
    return [
        {"position": p, "token_id": i, "text": text}
        for (p, i), text in zip(rows, decode(ids), strict=True)
    ]


__all__ = ["Show", "build_show"]
