"""One ``add`` call as an Arrow table of the Parquet sequence layout: one row per response, ragged
list columns for the per-token values, scalar columns for the per-response ones."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from mismatchctl.dump import arrays as ar
from mismatchctl.dump import layout as C
from mismatchctl.dump import per_row
from mismatchctl.errors import UsageError


def list_array(values: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Ragged rows as a list array (a large list past 2**31 values)."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] < 2**31:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))


def token_columns(
    layout: ar.Layout,
    mask: np.ndarray,
    inputs: Mapping[str, Any],
) -> dict[str, pa.Array]:
    """The per-token list columns: the two logprob sides, the mask, and the optional token ids
    and entropy (``inputs``: column name -> the caller's value, None when not given)."""
    out = {}
    for column, name in ((C.ROLLOUT, "rollout_logprobs"), (C.TRAINER, "trainer_logprobs")):
        out[column] = ar.floats(ar.per_token(inputs[column], name, layout), name)
    out[C.MASK] = mask
    if inputs.get(C.TOKENS) is not None:
        out[C.TOKENS] = ar.token_ids(
            ar.per_token(inputs[C.TOKENS], "token_ids", layout), "token_ids"
        )
    if inputs.get(C.ENTROPY) is not None:
        out[C.ENTROPY] = ar.floats(ar.per_token(inputs[C.ENTROPY], "entropy", layout), "entropy")
    return {name: list_array(values, layout.lengths) for name, values in out.items()}


def sequence_columns(rows: int, inputs: Mapping[str, Any]) -> dict[str, pa.Array]:
    """The per-response columns given (``inputs``: column name -> the caller's value or None)."""
    builders = {
        C.SAMPLE_ID: per_row.sample_ids,
        C.REWARD: per_row.rewards,
        C.WEIGHT_VERSION: per_row.weight_versions,
        C.GPU: per_row.gpus,
    }
    out = {
        name: build(inputs[name], rows)
        for name, build in builders.items()
        if inputs.get(name) is not None
    }
    out.update(_prompt_columns(rows, inputs.get(C.PROMPT_LENGTH), inputs.get(C.PROMPTS)))
    return out


def _prompt_columns(rows: int, lengths: Any, prompts: Any) -> dict[str, pa.Array]:
    """``prompt_length`` (given, or the length of each prompt) and the prompts' token ids."""
    out: dict[str, pa.Array] = {}
    given = None if lengths is None else ar.per_row_ints(lengths, "prompt_lengths", rows)
    if given is not None and (given < 0).any():
        i = int(np.flatnonzero(given < 0)[0])
        raise UsageError(
            f"prompt_lengths: row {i} is {int(given[i])} (expected a count, >= 0)",
            "pass the number of prompt tokens before each response.",
        )
    if prompts is not None:
        rows_ = ar.rows_of(prompts, "prompts")
        counts = np.array([len(r) for r in rows_], dtype=np.int64)
        if len(rows_) != rows:
            raise UsageError(
                f"prompts: {len(rows_)} rows, expected one per response ({rows})",
                "pass the prompt token ids of every response, in the mask's order.",
            )
        _same_lengths(given, counts)
        flat = ar.token_ids(ar.concat(rows_, np.int64), "prompts")
        out[C.PROMPTS] = list_array(flat, counts)
        given = counts if given is None else given
    if given is not None:
        out[C.PROMPT_LENGTH] = pa.array(given, pa.int64())
    return out


def _same_lengths(given: np.ndarray | None, counts: np.ndarray) -> None:
    if given is None:
        return
    bad = np.flatnonzero(given != counts)
    if len(bad):
        i = int(bad[0])
        raise UsageError(
            f"prompt_lengths: row {i} is {int(given[i])}, but its prompt has {int(counts[i])} "
            "token ids",
            "pass the unpadded prompt of each response (without left padding), or leave "
            "prompt_lengths out: it is then the length of each prompt.",
        )


def call_table(step: int, layout: ar.Layout, columns: dict[str, pa.Array]) -> pa.Table:
    """The table of one call: the step first, then the given columns in a fixed order."""
    ordered = {C.STEP: pa.array(np.full(layout.rows, step, dtype=np.int64))}
    for name in C.WRITTEN:
        if name in columns:
            ordered[name] = columns[name]
    ordered.update({k: v for k, v in columns.items() if k not in ordered})
    return pa.table(ordered)


def row_columns(
    rows: int, given: Mapping[str, Any], attrs: Mapping[str, Any] | None
) -> dict[str, pa.Array]:
    """Every per-response column of one call: the roles given (``given``: column name -> the
    caller's value or None) and the extra attributes."""
    return {**sequence_columns(rows, given), **per_row.attributes(attrs or {}, rows)}


def step_table(step: int, tables: list[pa.Table], metadata: Mapping[str, str]) -> pa.Table:
    """The calls of one step as one table, with the file's metadata."""
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise UsageError(
            f"step {step}: the add() calls of this step gave columns of "
            f"incompatible types ({str(exc).splitlines()[0]})",
            "give each argument the same kind of values in every call of a step.",
        ) from None
    return table.replace_schema_metadata(dict(metadata))


def other_columns(step: int, before: list[str], now: list[str]) -> UsageError:
    """A call of a step that gives other columns than the calls before it."""
    added = [c for c in now if c not in before]
    missing = [c for c in before if c not in now]
    parts = ([f"this call adds {', '.join(added)}"] if added else []) + (
        [f"it lacks {', '.join(missing)}"] if missing else []
    )
    return UsageError(
        f"step {step}: add() gives other columns than the earlier calls of this step "
        f"({'; '.join(parts) or 'in another order'})",
        "give the same optional arguments in every add() call of a step, or flush() between them.",
    )
