"""SGLang's base64 routes decoded a whole column at a time.

Python's ``base64`` decodes one sequence's string at a time after copying it out of Arrow; Polars'
``str.decode("base64")`` decodes the column's buffer in one call, 2-3x less CPU for the same
ids (``docs/benchmarks.md``, "MoE routes against their read floor"). Polars is at least as strict
as ``base64.b64decode(validate=True)``: a column it refuses, with a null, or with a string that is
not whole int32s is left to the per-sequence path, whose messages name the row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def decode_column(column: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """(every sequence's int32 ids, one flat array; each sequence's number of ids) of a string
    column of base64, or None where the per-sequence path must decide (its error messages)."""
    if column.null_count or len(column) == 0:
        return None
    import polars as pl  # only for base64 routes: slow to import

    try:
        decoded = pl.from_arrow(column).str.decode("base64")
    except pl.exceptions.PolarsError:  # not base64: the per-sequence path names the row
        return None
    binary = decoded.to_arrow(compat_level=pl.CompatLevel.oldest()).cast(pa.large_binary())
    _, offsets, data = binary.buffers()
    bounds = np.frombuffer(offsets, np.int64)[binary.offset : binary.offset + len(binary) + 1]
    sizes = np.diff(bounds)
    if (sizes % 4).any():
        return None
    ids = np.frombuffer(data, "<i4", int(bounds[-1] - bounds[0]) // 4, int(bounds[0]))
    if ids.dtype != np.int32 or not ids.flags.aligned:  # the compiled passes read native int32
        ids = ids.astype(np.int32)
    return ids, sizes // 4
