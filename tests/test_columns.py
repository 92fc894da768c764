"""Arrow <-> numpy by buffers (mismatchctl/columns.py) against pyarrow's own conversions: every
fixed-width type the store holds, sliced arrays (offsets), several chunks, nulls with a fill,
dictionary-encoded columns, booleans, strings, every list type's lengths; and the first-seen codes
of pyarrow's dictionary_encode."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from mismatchctl.columns import (
    arrow_as,
    arrow_of,
    equal_to,
    first_seen_codes,
    list_lengths,
    numpy_of,
    scalar_of,
    strings_of,
    valid_of,
)

TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint64(), pa.float32(),
         pa.float64()]  # fmt: skip


@pytest.mark.parametrize("kind", TYPES, ids=str)
def test_numbers_equal_pyarrow(kind: pa.DataType) -> None:
    rng = np.random.default_rng(3)
    values = rng.integers(0, 100, 50).astype(kind.to_pandas_dtype())
    arr = pa.array(values, kind)
    for col in (arr, arr.slice(7, 30), pa.chunked_array([arr.slice(0, 11), arr.slice(11)])):
        got = numpy_of(col)
        assert got.dtype == values.dtype
        np.testing.assert_array_equal(got, col.to_numpy())
    assert numpy_of(pa.chunked_array([], kind)).shape == (0,)


def test_nulls_are_filled_or_refused() -> None:
    arr = pa.array([1, None, 3, None, 5, 6, None, 8, 9, 10], pa.int64())
    for col in (arr, arr.slice(3, 6)):
        want = np.array([-1 if v is None else v for v in col.to_pylist()])
        np.testing.assert_array_equal(numpy_of(col, fill=-1), want)
        np.testing.assert_array_equal(valid_of(col), [v is not None for v in col.to_pylist()])
    with pytest.raises(ValueError, match="3 nulls"):
        numpy_of(arr)
    f = pa.array([0.5, None, 2.0], pa.float64())
    np.testing.assert_array_equal(numpy_of(f, fill=np.nan), [0.5, np.nan, 2.0])


def test_dictionaries_and_booleans() -> None:
    d = pa.array([3, 3, 7, None, 7, 9], pa.int64()).dictionary_encode()
    np.testing.assert_array_equal(numpy_of(d, fill=0), [3, 3, 7, 0, 7, 9])
    b = pa.array([True, False, None, True, True, False, False, True, True, False], pa.bool_())
    for col in (b, b.slice(1, 8)):
        want = [bool(v) for v in col.to_pylist()]
        np.testing.assert_array_equal(numpy_of(col, fill=False), want)


def test_arrow_of_round_trips() -> None:
    values = np.arange(20, dtype=np.int64)[::2]  # not contiguous: copied
    arr = arrow_of(values)
    assert arr.type == pa.int64() and arr.to_pylist() == values.tolist()
    mask = np.arange(13) % 3 == 0
    assert arrow_of(mask).to_pylist() == mask.tolist()
    floats = np.linspace(0, 1, 9)
    valid = np.array([1, 1, 0, 1, 0, 1, 1, 1, 0], bool)
    got = arrow_of(floats, valid=valid)
    assert got.null_count == 3
    assert got.to_pylist() == [x if ok else None for x, ok in zip(floats, valid, strict=True)]
    table = pa.table({"x": pa.array(range(6))})
    assert table.take(arrow_of(np.array([4, 0]))).column("x").to_pylist() == [4, 0]
    assert table.filter(arrow_of(np.arange(6) > 3)).num_rows == 2


def test_equal_to_strings() -> None:
    plain = pa.chunked_array([pa.array(["H20", None, "A100"]), pa.array(["A100", "H20"])])
    for col in (plain, plain.dictionary_encode()):
        np.testing.assert_array_equal(equal_to(col, "H20"), [True, False, False, False, True])
        assert not equal_to(col, "B200").any()


def test_first_seen_codes_are_dictionary_encode() -> None:
    values = np.array(["b", "a", "b", "c", "a", "zz", "c"])
    want = pa.array(values.tolist()).dictionary_encode().indices.to_pylist()
    assert first_seen_codes(values).tolist() == want
    assert first_seen_codes(np.array([], dtype=str)).tolist() == []


@pytest.mark.parametrize("kind", [*TYPES, pa.bool_()], ids=str)
def test_arrow_as_is_pa_array(kind: pa.DataType) -> None:
    values = np.array([0, 1, 5, 1, 0, 3, 7])
    missing = values == 5
    for mask in (None, missing, np.zeros(len(values), bool)):
        got = arrow_as(values, kind, missing=mask)
        want = pa.array(values.astype(np.dtype(bool) if kind == pa.bool_() else
                                      kind.to_pandas_dtype()), kind, mask=mask)  # fmt: skip
        assert got.type == kind and got.equals(want)
    assert scalar_of(1, kind) == want[1]  # a 1 (True) of the type
    with pytest.raises(TypeError, match="not string"):
        arrow_as(values, pa.string())


def test_strings_of_is_pa_array() -> None:
    for values in (["a", None, "", "Grüße", "H20"], [], [None, None], ["x" * 300]):
        got = strings_of(values)
        assert got.type == pa.string() and got.equals(pa.array(values, pa.string()))
        got.validate(full=True)
    with pytest.raises(pa.ArrowTypeError):  # not text: pyarrow's own error
        strings_of(["a", 3])


LISTS = [pa.list_(pa.int32()), pa.large_list(pa.int32()), pa.list_view(pa.int32()),
         pa.large_list_view(pa.int32())]  # fmt: skip


@pytest.mark.parametrize("kind", LISTS, ids=str)
def test_list_lengths(kind: pa.DataType) -> None:
    rows = [[1, 2, 3], [], None, [4], [5, 6], None, [7, 8, 9, 10]]
    arr = pa.array(rows, kind)
    for col, part in ((arr, rows), (arr.slice(3, 3), rows[3:6]),
                      (pa.chunked_array([arr.slice(0, 2), arr.slice(2)]), rows)):  # fmt: skip
        got = list_lengths(col, fill=-1)
        assert got.dtype == np.int64
        assert got.tolist() == [-1 if r is None else len(r) for r in part]
    assert list_lengths(arr.slice(0, 2)).tolist() == [3, 0]
    with pytest.raises(ValueError, match="2 nulls"):
        list_lengths(arr)
    fixed = pa.array([[1, 2], [3, 4], [5, 6]], pa.list_(pa.int8(), 2))
    assert list_lengths(fixed.slice(1)).tolist() == [2, 2]


@pytest.mark.parametrize(
    ("values", "kind"),
    [
        (np.array([1, 2**40], np.int64), pa.int32()),
        (np.array([3, -1], np.int64), pa.uint64()),
        (np.array([0.0, 1.5]), pa.int64()),
        (np.array([0.0, np.nan]), pa.int32()),
    ],
)
def test_a_value_the_type_cannot_hold_is_refused_as_pyarrow_refuses_it(
    values: np.ndarray, kind: pa.DataType
) -> None:
    """Never wrapped nor cut: pyarrow's own conversion refuses it, and so does ``arrow_as``; a
    null slot's value is not looked at."""
    with pytest.raises(pa.ArrowInvalid):
        pa.array(values, kind)
    with pytest.raises(pa.ArrowInvalid):
        arrow_as(values, kind)
    kept = arrow_as(values, kind, missing=np.array([False, True]))
    assert kept.null_count == 1 and kept[0].as_py() == values[0]
