"""One ``add`` call as an Arrow table of the Parquet sequence layout: one row per response, ragged
list columns for the per-token values, scalar columns for the per-response ones."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from mismatchctl.dump import arrays as ar
from mismatchctl.dump import columns as C
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
