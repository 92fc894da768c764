"""Arrow columns as numpy arrays and numpy arrays as Arrow arrays, by their buffers.

pyarrow's own conversions (``to_numpy``, ``pa.array`` of a numpy array, scalars made from Python
values, ``fill_null`` with a Python value) import pandas when it is installed: 0.4-0.9 s and
about 37 MB of every command that reads the store or ingests, for nothing it needs. These read and
make the buffers directly for the fixed-width types the store holds (integers and floats, with or
without nulls, dictionary-encoded or not), booleans, strings and the lengths of list columns, and
fall back to pyarrow's conversion for anything else.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa


def numpy_of(column: pa.Array | pa.ChunkedArray, fill: Any = None) -> np.ndarray:
    """The values of an Arrow column of numbers as numpy (zero-copy and read-only when it is one
    chunk without nulls); nulls replaced by ``fill`` (a ValueError when there are nulls and no
    ``fill``). A dictionary-encoded column gives its decoded values."""
    if isinstance(column, pa.ChunkedArray):
        parts = [numpy_of(chunk, fill) for chunk in column.chunks]
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return np.zeros(0, dtype=_numpy_type(column.type))
        return np.concatenate(parts)
    if pa.types.is_dictionary(column.type):
        values = numpy_of(column.dictionary)
        indices = numpy_of(column.indices, fill=-1 if fill is not None else None)
        if column.null_count == 0:
            return values[indices]
        out = values[np.maximum(indices, 0)]
        out[indices < 0] = fill
        return out
    if pa.types.is_boolean(column.type):
        values = _bits(column.buffers()[1], column.offset, len(column))
        return values if column.null_count == 0 else _filled(values, column, fill)
    kind = _numpy_type(column.type)
    if kind is None:  # strings, nested types: pyarrow's own conversion
        values = column.to_numpy(zero_copy_only=False)
        if column.null_count and fill is not None:
            values = np.where(valid_of(column), values, fill)
        return values
    data = column.buffers()[1]
    n, offset = len(column), column.offset
    values = (
        np.frombuffer(data, dtype=kind, count=n, offset=offset * kind.itemsize)
        if data is not None and n
        else np.zeros(n, dtype=kind)
    )
    return values if column.null_count == 0 else _filled(values, column, fill)


def _filled(values: np.ndarray, column: pa.Array, fill: Any) -> np.ndarray:
    if fill is None:
        raise ValueError(f"the column has {column.null_count:,} nulls and no fill value was given")
    out = values.copy()
    out[~valid_of(column)] = fill
    return out


def _bits(buffer: pa.Buffer | None, offset: int, n: int) -> np.ndarray:
    """Arrow's packed bits (least significant first) as numpy booleans."""
    if buffer is None or n == 0:
        return np.zeros(n, dtype=bool)
    bits = np.unpackbits(np.frombuffer(buffer, dtype=np.uint8), bitorder="little")
    return bits[offset : offset + n].astype(bool)


def valid_of(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Whether each value is not null (booleans)."""
    if isinstance(column, pa.ChunkedArray):
        parts = [valid_of(chunk) for chunk in column.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)
    n = len(column)
    if column.null_count == 0:
        return np.ones(n, dtype=bool)
    if column.null_count == n and column.buffers()[0] is None:  # a null-typed column
        return np.zeros(n, dtype=bool)
    return _bits(column.buffers()[0], column.offset, n)


def arrow_of(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A numpy array of numbers or booleans as an Arrow array (its buffer, copied to be
    contiguous when it is not; booleans packed to Arrow's bits), null where ``valid`` is False."""
    values = np.ascontiguousarray(values)
    n = len(values)
    nulls = None if valid is None or bool(np.all(valid)) else _packed(np.asarray(valid, bool))
    if values.dtype == np.bool_:
        return pa.Array.from_buffers(pa.bool_(), n, [nulls, _packed(values)])
    kind = pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(kind, n, [nulls, pa.py_buffer(values)])


def arrow_as(values: Any, kind: pa.DataType, missing: np.ndarray | None = None) -> pa.Array:
    """``pa.array(values, kind, mask=missing)`` for a number or boolean ``kind``, by buffers:
    the values converted to the type's numpy dtype, null where ``missing`` is True."""
    dtype = np.dtype(bool) if pa.types.is_boolean(kind) else _numpy_type(kind)
    if dtype is None:
        raise TypeError(f"arrow_as makes numbers and booleans, not {kind}")
    valid = None if missing is None else ~np.asarray(missing, dtype=bool)
    values = np.asarray(values)
    _refuse_what_does_not_fit(values, dtype, kind, valid)
    if valid is not None and values.dtype.kind == "f" and dtype.kind in "iu":
        values = np.where(valid, values, 0)  # a null slot's NaN is not cast
    return arrow_of(values.astype(dtype, copy=False), valid)


def _refuse_what_does_not_fit(
    values: np.ndarray, dtype: np.dtype, kind: pa.DataType, valid: np.ndarray | None
) -> None:
    """``pa.array``'s safe conversion: a value an integer type cannot hold (out of its range,
    or a float with a fraction) is refused with pyarrow's own error, never wrapped or cut."""
    if dtype.kind not in "iu" or np.can_cast(values.dtype, dtype, "safe") or not len(values):
        return
    kept = values if valid is None else values[valid]
    if not len(kept):
        return
    info = np.iinfo(dtype)
    if kept.dtype.kind == "f":
        bad = ~np.isfinite(kept) | (kept != np.trunc(kept)) | (kept < info.min) | (kept > info.max)
    elif info.min <= kept.min() and kept.max() <= info.max:  # two passes, no mask
        return
    else:
        bad = (kept < info.min) | (kept > info.max)
    if bad.any():
        value = kept[np.flatnonzero(bad)[0]].item()
        raise pa.ArrowInvalid(
            f"Integer value {value} not in range for {kind}: {info.min} to {info.max}"
        )


def scalar_of(value: float | bool, kind: pa.DataType) -> pa.Scalar:
    """An Arrow scalar of a number or boolean (``pa.scalar`` imports pandas)."""
    return arrow_as(np.array([value]), kind)[0]


def strings_of(values: list[str | None]) -> pa.Array:
    """``pa.array(values, pa.string())`` by buffers: UTF-8 bytes and 32-bit offsets, null where
    a value is None."""
    if not all(v is None or isinstance(v, str) for v in values):  # pyarrow's errors for them
        return pa.array(values, pa.string())
    encoded = [b"" if v is None else v.encode("utf-8") for v in values]
    sizes = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    ends = np.cumsum(sizes)
    if len(ends) and ends[-1] > np.iinfo(np.int32).max:  # past a string column's offsets
        return pa.array(values, pa.string())
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    offsets[1:] = ends
    missing = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    nulls = _packed(~missing) if missing.any() else None
    buffers = [nulls, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(pa.string(), len(values), buffers)


def list_lengths(column: pa.Array | pa.ChunkedArray, fill: int | None = None) -> np.ndarray:
    """Each list's length (any list type: list, large list, fixed size, list view) as int64;
    a null list's length ``fill`` (a ValueError when there are null lists and no ``fill``)."""
    import pyarrow.compute as pc  # here: the views read no list column, nor load it (0.1 s)

    lengths = numpy_of(pc.list_value_length(column), fill)
    return lengths.astype(np.int64)  # a copy: writable, as pyarrow's conversion gave


def _packed(flags: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(flags, bitorder="little"))


def equal_to(column: pa.Array | pa.ChunkedArray, value: str) -> np.ndarray:
    """Whether each value of a string column (dictionary-encoded or not) is ``value`` (null is
    not), without making an Arrow scalar of it."""
    if isinstance(column, pa.ChunkedArray):
        parts = [equal_to(chunk, value) for chunk in column.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)
    encoded = column if pa.types.is_dictionary(column.type) else column.dictionary_encode()
    labels = encoded.dictionary.to_pylist()
    if value not in labels:
        return np.zeros(len(column), dtype=bool)
    return numpy_of(encoded.indices, fill=-1) == labels.index(value)


def _numpy_type(kind: pa.DataType) -> np.dtype | None:
    """The numpy type of a fixed-width number type (``to_pandas_dtype`` names it without
    importing pandas), None for any other type."""
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        return np.dtype(kind.to_pandas_dtype())
    return None


def first_seen_codes(values: np.ndarray) -> np.ndarray:
    """Each value's index among the distinct values in order of first appearance (as pyarrow's
    ``dictionary_encode`` numbers them), for any sortable numpy array (strings included)."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    _, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse.reshape(-1)]
