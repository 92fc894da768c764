"""Decoding one side's routes from its Arrow column, and the compiled passes over them: every
list nesting and integer type against numpy, the ids read without a copy, the vectorized
prime-rl path against the row-by-row one (same arrays, same errors), the kernels against a
plain reference over sets."""

from __future__ import annotations

import base64
import itertools

import numpy as np
import pyarrow as pa
import pytest

from mismatchctl.errors import InputError
from mismatchctl.ingest import routes, routing_kernels
from mismatchctl.ingest.routes import Layout, read_side

LAYERS, TOP_K = 3, 2


def _ids(tokens: int, seed: int = 0, experts: int = 8) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ids = np.argsort(rng.random((tokens, LAYERS, experts)), axis=2)[:, :, :TOP_K]
    ids[rng.random(tokens) < 0.1] = -1
    return ids.astype(np.int64)


def _offsets(lengths: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def _layout(lengths: list[int]) -> Layout:
    n = len(lengths)
    return Layout(np.array(lengths, np.int64), np.full(n, -1, np.int64))


def _fixed(ids: np.ndarray, lengths: list[int], t: pa.DataType) -> pa.Array:
    inner = pa.FixedSizeListArray.from_arrays(pa.array(ids.reshape(-1), t), TOP_K)
    rows = pa.FixedSizeListArray.from_arrays(inner, LAYERS)
    return pa.ListArray.from_arrays(pa.array(_offsets(lengths)), rows)


def _variable(ids: np.ndarray, lengths: list[int], t: pa.DataType, large: bool) -> pa.Array:
    n = len(ids)
    inner = pa.ListArray.from_arrays(
        pa.array(np.arange(n * LAYERS + 1, dtype=np.int32) * TOP_K), pa.array(ids.reshape(-1), t)
    )
    rows = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * LAYERS), inner)
    if large:
        return pa.LargeListArray.from_arrays(pa.array(_offsets(lengths).astype(np.int64)), rows)
    return pa.ListArray.from_arrays(pa.array(_offsets(lengths)), rows)


LENGTHS = [5, 9, 1, 7]


@pytest.mark.parametrize(
    "make",
    [
        lambda ids: pa.array(_rows_of(ids, LENGTHS)),  # ndarray.tolist() per sequence
        lambda ids: _fixed(ids, LENGTHS, pa.int16()),
        lambda ids: _fixed(ids, LENGTHS, pa.int8()),
        lambda ids: _variable(ids, LENGTHS, pa.int32(), large=True),
        lambda ids: _variable(ids, LENGTHS, pa.int64(), large=False),
        lambda ids: pa.chunked_array(  # chunks, as a table column of batches
            [_fixed(ids[:14], LENGTHS[:2], pa.int16()), _fixed(ids[14:], LENGTHS[2:], pa.int16())]
        ),
    ],
    ids=["tolist", "fixed-int16", "fixed-int8", "large-int32", "list-int64", "chunked"],
)
def test_every_nesting_gives_the_numpy_routes(make: object) -> None:
    ids = _ids(sum(LENGTHS))
    side = read_side(make(ids), "c", "f", _layout(LENGTHS), None, 0)  # type: ignore[operator]
    assert side.ids.shape == (sum(LENGTHS), LAYERS, TOP_K)
    assert np.array_equal(side.ids, ids)
    assert side.offsets.tolist() == _offsets(LENGTHS).tolist()
    assert side.first.tolist() == [0] * len(LENGTHS)


def test_slices_and_the_ids_read_without_a_copy() -> None:
    ids = _ids(sum(LENGTHS), seed=1)
    col = _fixed(ids, LENGTHS, pa.int16()).slice(1, 2)  # a batch of a longer column
    side = read_side(col, "c", "f", _layout(LENGTHS[1:3]), None, 0)
    assert np.array_equal(side.ids, ids[5:15])
    values = col.flatten().flatten().flatten()
    address = values.buffers()[1].address + values.offset * 2
    assert side.ids.__array_interface__["data"][0] == address  # the Arrow buffer itself
    var = _variable(ids, LENGTHS, pa.int32(), large=False).slice(2, 2)
    assert np.array_equal(read_side(var, "c", "f", _layout(LENGTHS[2:]), None, 0).ids, ids[14:])


def test_wide_unsigned_ids_are_narrowed_to_what_holds_them() -> None:
    ids = _ids(sum(LENGTHS), seed=3)
    for offset, dtype in ((0, np.int16), (40_000, np.int32)):
        wide = np.where(ids >= 0, ids + offset, 0)  # unsigned: no -1
        col = _variable(wide, LENGTHS, pa.uint64(), large=False)
        side = read_side(col, "c", "f", _layout(LENGTHS), None, 0)
        assert side.ids.dtype == dtype
        assert np.array_equal(side.ids, wide)


def test_int64_ids_are_read_as_they_are() -> None:
    """``ndarray.tolist()``'s int64 ids: a view of the Arrow buffer (no narrowing copy); an id
    beyond int32 is left to the checks of the rows, which refuse it."""
    ids = _ids(sum(LENGTHS), seed=3)
    col = _variable(ids, LENGTHS, pa.int64(), large=False)
    side = read_side(col, "c", "f", _layout(LENGTHS), None, 0)
    assert side.ids.dtype == np.int64 and np.array_equal(side.ids, ids)
    values = col.flatten().flatten().flatten()
    address = values.buffers()[1].address + values.offset * 8
    assert side.ids.__array_interface__["data"][0] == address
    big = read_side(_variable(ids + (1 << 40), LENGTHS, pa.int64(), False), "c", "f",
                    _layout(LENGTHS), None, 0).ids  # fmt: skip
    flat = big.reshape(len(big), -1)
    dead = np.zeros(len(flat), dtype=np.bool_)
    high = np.iinfo(np.int32).max
    code, row, _ = routing_kernels.scan_side(flat, big.shape[1], big.shape[2], high, dead)
    assert (code, row) == (routing_kernels.BAD_ID, 0)


@pytest.mark.parametrize("arrow_type", [pa.uint32(), pa.uint64()])
def test_narrowing_cut_in_ranges_sees_an_id_in_any_range(arrow_type: pa.DataType) -> None:
    """The narrowing pass runs over ranges on threads: an id that int16 cannot hold is seen in
    whichever range it lies, and the ids come back whole in the type that holds them."""
    from mismatchctl.ingest.routes import _ints
    from mismatchctl.ingest.routing_threads import MIN_ROWS

    rng = np.random.default_rng(5)
    ids = rng.integers(0, 256, 4 * MIN_ROWS + 7)
    assert _ints(pa.array(ids, arrow_type), "f").dtype == np.int16
    for at in (0, len(ids) // 2, len(ids) - 1):
        wide = ids.copy()
        wide[at] = 40_000
        narrowed = _ints(pa.array(wide, arrow_type), "f")
        assert narrowed.dtype == np.int32
        assert np.array_equal(narrowed, wide)


def _rows_of(ids: np.ndarray, lengths: list[int]) -> list:
    return [ids[a:b].tolist() for a, b in itertools.pairwise(_offsets(lengths))]


def test_irregular_lists_and_nulls_keep_their_messages() -> None:
    ids = _ids(sum(LENGTHS), seed=2)
    rows = _rows_of(ids, LENGTHS)
    rows[1][3] = rows[1][3][:2]  # a row of 2 layers among rows of 3
    with pytest.raises(InputError) as err:
        read_side(pa.array(rows), "c", "f", _layout(LENGTHS), None, 0)
    assert err.value.message == (
        "f: column `c`: the layer count changes within the routes: 3, then 2 (at entry 8 of the "
        "rows)"
    )
    rows = _rows_of(ids, LENGTHS)
    rows[2][0][1] = [1, 2, 3]  # top-3 in one layer
    with pytest.raises(InputError, match=r"the top-k changes within the routes: 2, then 3 \(at "):
        read_side(pa.array(rows), "c", "f", _layout(LENGTHS), None, 0)
    rows = _rows_of(ids, LENGTHS)
    rows[3] = None
    with pytest.raises(InputError, match=r"row 3 is null \(expected a list\)"):
        read_side(pa.array(rows), "c", "f", _layout(LENGTHS), None, 0)
    rows = _rows_of(ids, LENGTHS)
    rows[0][1][2][0] = None
    with pytest.raises(InputError, match=r"1 null expert id\(s\)"):
        read_side(pa.array(rows), "c", "f", _layout(LENGTHS), None, 0)
    with pytest.raises(InputError, match=r"an expert id beyond int32"):
        big = _variable(np.maximum(ids, 0) + (1 << 40), LENGTHS, pa.uint64(), large=False)
        read_side(big, "c", "f", _layout(LENGTHS), None, 0)


def _prime_column(arrays: list[np.ndarray], dtypes: list[str | None]) -> pa.Array:
    return pa.array(
        [
            None if a is None else {"data": a.tobytes(), "shape": list(a.shape), "dtype": d}
            for a, d in zip(arrays, dtypes, strict=True)
        ]
    )


def _both(col: pa.Array, layout: Layout) -> tuple[object, object]:
    """The vectorized reading and the row-by-row one: (SideRoutes or error message) each."""
    out = []
    for read in (routes._prime, _row_by_row):
        try:
            out.append(read(col, "c", "f", layout))
        except InputError as exc:
            out.append(exc.message)
    return out[0], out[1]


def _row_by_row(col: pa.Array, name: str, what: str, layout: Layout) -> routes.SideRoutes:
    fields = [col.type.field(i).name for i in range(col.type.num_fields)]
    parts = dict(zip(fields, col.flatten(), strict=True))
    return routes._prime_rows(
        col, parts["data"], parts["shape"], parts.get("dtype"), name, what, layout
    )


def test_prime_bytes_vectorized_equal_row_by_row() -> None:
    prompts, lengths = [2, 3, 1, 4], [5, 4, 6, 3]
    full = [
        _ids(p + t, seed=i).clip(0) for i, (p, t) in enumerate(zip(prompts, lengths, strict=True))
    ]
    full[1] = full[1][:-1]  # one fewer row: the last token is never an input
    layout = Layout(np.array(lengths, np.int64), np.array(prompts, np.int64))

    def check(arrays: list, dtypes: list, expect_error: str | None = None) -> None:
        fast, slow = _both(_prime_column(arrays, dtypes), layout)
        if expect_error is not None:
            assert fast == slow and expect_error in str(fast), (fast, slow)
            return
        assert isinstance(fast, routes.SideRoutes) and isinstance(slow, routes.SideRoutes)
        assert fast.ids.dtype == slow.ids.dtype
        assert np.array_equal(fast.ids, slow.ids)
        assert np.array_equal(fast.offsets, slow.offsets)
        assert np.array_equal(fast.first, slow.first)

    u8 = [a.astype(np.uint8) for a in full]
    check(u8, ["uint8", None, "", "uint8"])
    check([a.astype(np.int16) for a in full], ["int16"] * 4)
    check([u8[0], full[1].astype(np.int32), u8[2], u8[3]], ["uint8", "int32", "uint8", None])
    check([u8[0], None, u8[2], u8[3]], ["uint8"] * 4, "row 1 is null")
    check(u8, ["uint8", "float32", "uint8", "uint8"], "dtype 'float32'")
    flat = [u8[0], u8[1], u8[2].reshape(len(u8[2]), -1), u8[3]]
    check(flat, ["uint8"] * 4, "row 2: dtype 'uint8', shape [7, 6]")
    short = _prime_column(u8, ["uint8"] * 4).to_pylist()
    short[3]["data"] = short[3]["data"][:-1]
    fast, slow = _both(pa.array(short), layout)
    assert fast == slow and "row 3: 41 bytes, expected 42 for shape [7, 3, 2]" in str(fast)
    check(
        [u8[0], u8[1][:-1], u8[2], u8[3]], ["uint8"] * 4, "row 1: shape [5, 3, 2], expected [6 or 7"
    )
    other = [u8[0], u8[1], u8[2][:, :2], u8[3]]
    check(other, ["uint8"] * 4, "the [layers, top_k] of the routes change within the file")
    with pytest.raises(InputError, match=r"row 0: the routes cover the whole sequence"):
        routes._prime(
            _prime_column(u8, ["uint8"] * 4), "c", "f", Layout(layout.lengths, -layout.prompts)
        )


def _sglang_both(
    texts: list[str | None], layout: Layout, starts: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> tuple[object, object]:
    """The whole-column decoding and the per-sequence one (the column decoder turned off):
    (SideRoutes or error message) each."""
    out = []
    for whole in (True, False):
        with monkeypatch.context() as m:
            if not whole:
                m.setattr(routes.routes_base64, "decode_column", lambda column: None)
            try:
                out.append(read_side(pa.array(texts), "c", "f", layout, starts, TOP_K))
            except InputError as exc:
                out.append(exc.message)
    return out[0], out[1]


def test_sglang_base64_whole_column_equals_per_sequence(monkeypatch: pytest.MonkeyPatch) -> None:
    prompts, lengths, starts = [2, 3, 1, 4], [5, 4, 6, 3], np.array([1, 0, 0, 2], np.int64)
    layout = Layout(np.array(lengths, np.int64), np.array(prompts, np.int64))
    rows = [p + t - 1 - s for p, t, s in zip(prompts, lengths, starts, strict=True)]
    arrays = [_ids(r, seed=i).astype("<i4") for i, r in enumerate(rows)]
    texts: list[str | None] = [base64.b64encode(a.tobytes()).decode() for a in arrays]
    col = pa.array(texts)
    decoded = routes.routes_base64.decode_column(col)
    assert decoded is not None and np.array_equal(decoded[0], np.concatenate(arrays).ravel())
    fast, slow = _sglang_both(texts, layout, starts, monkeypatch)
    assert isinstance(fast, routes.SideRoutes) and isinstance(slow, routes.SideRoutes)
    assert fast.ids.dtype == slow.ids.dtype == np.int32
    for got, want in ((fast.ids, slow.ids), (fast.offsets, slow.offsets), (fast.first, slow.first)):
        assert np.array_equal(got, want)
    assert np.array_equal(fast.ids, np.concatenate(arrays))
    assert np.array_equal(fast.first, starts - np.array(prompts))
    part = Layout(layout.lengths[1:3], layout.prompts[1:3])
    sliced = read_side(col.slice(1, 2), "c", "f", part, starts[1:3], TOP_K)
    assert np.array_equal(sliced.ids, np.concatenate(arrays[1:3]))

    def check(changed: list[str | None], expect: str) -> None:
        fast, slow = _sglang_both(changed, layout, starts, monkeypatch)
        assert fast == slow, (fast, slow)
        assert expect in str(fast)

    check([texts[0], None, texts[2], texts[3]], "row 1 is null (expected base64 routes)")
    check([texts[0], texts[1], "not base64!", texts[3]], "row 2 is not base64")
    check([texts[0], base64.b64encode(b"\0" * 6).decode(), *texts[2:]], "6 bytes, not a whole")
    short = base64.b64encode(arrays[3][:-1].tobytes()).decode()
    check([*texts[:3], short], "row 3: 18 ids do not fill 4 rows")
    wider = base64.b64encode(np.zeros((rows[1], LAYERS + 1, TOP_K), "<i4").tobytes()).decode()
    check([texts[0], wider, *texts[2:]], "the layer count changes within the routes: 3, then 4")
    # padding past the end, which Python's strict decoding accepts and Polars refuses: the
    # column is decoded row by row, to the same ids
    lax = [*texts[:3], texts[3] + "===="]
    assert routes.routes_base64.decode_column(pa.array(lax)) is None
    fast, slow = _sglang_both(lax, layout, starts, monkeypatch)
    assert isinstance(fast, routes.SideRoutes) and isinstance(slow, routes.SideRoutes)
    assert np.array_equal(fast.ids, np.concatenate(arrays))


# --- the compiled passes --------------------------------------------------------------------


def _scan_reference(ids: np.ndarray, high: int) -> tuple[int, int, np.ndarray]:
    """(code, first bad row, fills) by plain Python over each row."""
    dead = np.zeros(len(ids), bool)
    for r, row in enumerate(ids):
        flat = row.reshape(-1)
        if ((flat < -1) | (flat >= high)).any():
            return routing_kernels.BAD_ID, r, dead
        if (flat == -1).any():
            if not (flat == -1).all():
                return routing_kernels.PARTIAL, r, dead
            continue
        if row.shape[1] > 1 and (flat == flat[0]).all():
            dead[r] = True
            continue
        if any(len(set(layer.tolist())) < len(layer) for layer in row):
            return routing_kernels.REPEATED, r, dead
    return routing_kernels.OK, -1, dead


@pytest.mark.parametrize("experts", [8, 300, 100_000])  # one mask, the stamps, pairwise
def test_scan_side_against_the_reference(experts: int) -> None:
    rng = np.random.default_rng(experts)
    base = np.argsort(rng.random((400, 4, min(experts, 64))), axis=2)[:, :, :3]
    base = base * (experts // min(experts, 64))  # ids spread up to the expert count
    base[rng.random(400) < 0.1] = -1
    base[rng.random(400) < 0.05] = 7  # fills
    dtype = np.int16 if experts < 32768 else np.int32
    clean = base.astype(dtype)
    cases = {"clean": clean}
    row = np.tile(np.arange(3) * ((experts - 1) // 2), 4).reshape(4, 3)
    for name, (r, value) in {"bad": (150, experts), "neg": (200, -2), "dup": (300, None)}.items():
        spoiled = clean.copy()
        spoiled[r] = row  # ids as far apart as the experts allow: every path of the check
        spoiled[r, 2, 1] = value if value is not None else spoiled[r, 2, 2]
        cases[name] = spoiled
    partial = clean.copy()
    partial[250] = row
    partial[250, 1, 1] = -1
    cases["partial"] = partial
    for name, ids in cases.items():
        dead = np.zeros(len(ids), np.bool_)
        code, row, top = routing_kernels.scan_side(ids.reshape(len(ids), -1), 4, 3, experts, dead)
        ref_code, ref_row, ref_dead = _scan_reference(ids, experts)
        assert (code, row) == (ref_code, ref_row), name
        if code == routing_kernels.OK:
            assert np.array_equal(dead, ref_dead), name
            assert top == ids.max(), name


def test_compare_frames_against_sets() -> None:
    rng = np.random.default_rng(9)
    n, layers, k = 300, 5, 4
    a = np.argsort(rng.random((n, layers, 36)), axis=2)[:, :, :k].astype(np.int16)
    b = a.copy()
    for r in range(n):
        kind = r % 4
        if kind == 1:  # the same sets, reordered
            b[r] = b[r][:, ::-1]
        elif kind == 2:  # one layer partly different
            b[r, r % layers, : r % k + 1] = 39 - np.arange(r % k + 1)  # ids a never has
    a[10] = -1
    a_dead = np.zeros(n, np.bool_)
    a_dead[20] = True
    of = np.arange(n, dtype=np.int64)
    of[30] = -1
    equal = np.zeros(n, np.uint64)
    overlap = np.zeros((n, layers), np.uint8)
    compared = np.zeros(n, np.bool_)
    routing_kernels.compare_frames(
        a.reshape(n, -1), of, a_dead, b.reshape(n, -1), of, np.zeros(n, np.bool_),
        layers, k, equal, overlap, compared,
    )  # fmt: skip
    for r in range(n):
        if r in (10, 20, 30):
            assert not compared[r]
            continue
        sets = [(set(x.tolist()), set(y.tolist())) for x, y in zip(a[r], b[r], strict=True)]
        assert compared[r]
        assert overlap[r].tolist() == [len(x & y) for x, y in sets]
        assert int(equal[r]) == sum(1 << i for i, (x, y) in enumerate(sets) if x == y)
