"""Turning Arrow columns into the numpy arrays readers hand on, with clear errors for bad types."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mismatchctl.columns import list_lengths, numpy_of, scalar_of, valid_of
from mismatchctl.errors import InputError


def is_list_type(t: pa.DataType) -> bool:
    return (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
    )


def list_values(col: pa.Array | pa.ChunkedArray, what: str) -> tuple[pa.Array, np.ndarray]:
    """(flat values, per-row lengths) of a list column; a null list is an error naming the row."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if pa.types.is_list_view(col.type):
        col = col.cast(pa.list_(col.type.value_type))
    if col.null_count:
        row = int(np.flatnonzero(~valid_of(col))[0])
        raise InputError(
            f"{what}: row {row} is null (expected a list)",
            "drop rows without data before dumping, or repair the file.",
        )
    lengths = list_lengths(col)
    return col.flatten(), lengths


def floats(values: pa.Array, what: str) -> np.ndarray:
    """float64 numpy; null entries become NaN (and are then reported as non-finite)."""
    t = values.type
    if not (pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_decimal(t)):
        raise InputError(f"{what}: expected numbers, found {t}", "map the right column.")
    return numpy_of(values.cast(pa.float64()), fill=np.nan)


def mask01(values: pa.Array, what: str) -> np.ndarray:
    """A 0/1 mask as bool; anything but 0 and 1 (or true/false) is an error."""
    t = values.type
    if not (pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t)):
        raise InputError(f"{what}: expected a 0/1 mask, found {t}", "map the right column.")
    if values.null_count:
        raise InputError(f"{what}: {values.null_count} null mask values", "fill the mask with 0/1.")
    arr = numpy_of(values)
    if arr.dtype == bool:
        return arr
    wrong = (arr != 0) & (arr != 1)
    if wrong.any():
        raise InputError(
            f"{what}: mask value {arr[np.flatnonzero(wrong)[0]].item()!r} "
            f"({int(wrong.sum())} values are neither 0 nor 1)",
            "map a 0/1 response mask (attention_mask is not one: it includes tool tokens).",
        )
    return arr == 1


def ints(values: pa.Array, what: str) -> np.ndarray:
    """int64 numpy of an integer (or integral float) column without nulls."""
    if values.null_count:
        raise InputError(f"{what}: {values.null_count} null values", "fill or map another column.")
    t = values.type
    if pa.types.is_integer(t):
        try:
            return numpy_of(values.cast(pa.int64()))
        except pa.ArrowInvalid:  # uint64 beyond int64
            raise InputError(
                f"{what}: expected integers in the int64 range, found {pc.max(values).as_py()}",
                "map an integer column with values below 2**63.",
            ) from None
    if pa.types.is_floating(t):
        arr = numpy_of(values)
        if np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            return arr.astype(np.int64)
    raise InputError(f"{what}: expected integers, found {t}", "map an integer column.")


def strings(values: pa.Array) -> list[str]:
    """Any scalar column as text (sample ids may be ints, strings or uuids)."""
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return [v if v is not None else "" for v in values.to_pylist()]
    return ["" if v is None else str(v) for v in values.to_pylist()]


def optional_floats(values: pa.Array, what: str) -> np.ndarray:
    """Per-row optional numbers (reward, weight version): NaN where null."""
    return floats(values, what)


def filled(values: pa.Array | pa.ChunkedArray, value: int) -> pa.Array | pa.ChunkedArray:
    """``values.fill_null(value)``, with the fill made by buffers for a column of numbers or
    booleans (a Python value makes pyarrow import pandas); any other type keeps pyarrow's own
    fill and its errors."""
    t = values.type
    if not values.null_count:
        return values
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return values.fill_null(scalar_of(value, t))
    return values.fill_null(value)
