"""The compiled walks that replaced numpy passes of the routing rows give the numpy passes'
results: the frame index of a side's rows, the compact columns of the model tokens, and the
comparison of two rows by the words of their bytes (or not at all, when the scan of the second
side found them equal)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from mismatchctl import schema as S
from mismatchctl.ingest import routing_kernels
from mismatchctl.ingest.batch import offsets_from_lengths
from mismatchctl.ingest.routes import SideRoutes
from mismatchctl.ingest.routing_rows import (
    ALIGNED_INPUT,
    ALIGNED_OUTPUT,
    PAIRED_FLIPPED,
    PAIRED_SAME,
    PAIRED_UNPAIRED,
    _columns,
    _frame_index,
    offsets_frame,
)


def _frame_index_numpy(side: SideRoutes, frame: np.ndarray) -> np.ndarray:
    """The numpy passes ``_frame_index`` made before its compiled walk."""
    rows = np.diff(side.offsets)
    of = np.full(int(frame[-1]), -1, dtype=np.int64)
    seq = np.repeat(np.arange(len(rows)), rows)
    index = np.arange(len(side.ids), dtype=np.int64) - side.offsets[seq]
    response = side.first[seq] + index
    keep = response >= -1
    of[frame[:-1][seq[keep]] + 1 + response[keep]] = np.flatnonzero(keep)
    return of


def _columns_numpy(
    equal: np.ndarray,
    overlap: np.ndarray,
    compared: np.ndarray,
    own: np.ndarray,
    frame: np.ndarray,
    aligned: str,
    layers: int,
) -> dict[str, list]:
    """The numpy passes ``_columns`` made before its compiled walk, as Python lists."""
    full = np.uint64((1 << layers) - 1) if layers < 64 else np.uint64(2**64 - 1)
    producing = own - 1 if aligned == ALIGNED_INPUT else own
    differs = compared & (equal != full)
    diff = ~equal[producing].astype(np.uint64) & full
    low = diff & (~diff + np.uint64(1))
    _, exponent = np.frexp(low.astype(np.float64))
    first = np.where(diff == 0, layers, exponent.astype(np.int64) - 1)
    paired = np.where(
        compared[producing],
        np.where(differs[producing], PAIRED_FLIPPED + first, PAIRED_SAME),
        PAIRED_UNPAIRED,
    )
    c = np.concatenate([[0], np.cumsum(differs, dtype=np.int64)])
    seq_start = np.repeat(frame[:-1], np.diff(frame))
    before = c[np.arange(len(differs))] - c[seq_start] > 0
    valid = compared[own]
    return {
        S.ROUTE_EQUAL: [int(e) if v else None for e, v in zip(equal[own], valid, strict=True)],
        S.ROUTE_OVERLAP: [
            o.tobytes() if v else None for o, v in zip(overlap[own], valid, strict=True)
        ],
        S.ROUTE_PAIRED: paired.tolist(),
        S.ROUTE_FLIP_BEFORE: before[own].tolist(),
    }


def _frames(seed: int, layers: int) -> tuple[np.ndarray, ...]:
    """Frame rows of 40 sequences of 1-60 logprobs as a comparison leaves them: a tenth not
    compared, a twentieth differing on one to three layers (the rest equal), and each sequence's
    model tokens (own frame rows: response index 0 on, some masked)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 61, 40)
    frame = offsets_frame(lengths)
    n = int(frame[-1])
    full = (1 << layers) - 1
    equal = np.full(n, full, dtype=np.uint64)
    overlap = np.full((n, layers), 8, dtype=np.uint8)
    for f in np.flatnonzero(rng.random(n) < 0.05):
        for layer in rng.choice(layers, rng.integers(1, min(layers, 3) + 1), replace=False):
            equal[f] &= ~np.uint64(1 << int(layer))
            overlap[f, layer] = rng.integers(0, 8)
    compared = rng.random(n) >= 0.1
    equal[~compared], overlap[~compared] = 0, 0
    own = np.concatenate(
        [frame[i] + 1 + np.flatnonzero(rng.random(t) > 0.2) for i, t in enumerate(lengths.tolist())]
    ).astype(np.int64)
    return equal, overlap, compared, own, frame


@pytest.mark.parametrize("layers", [1, 24, 48, 64])
@pytest.mark.parametrize("aligned", [ALIGNED_INPUT, ALIGNED_OUTPUT])
def test_token_columns_equal_the_numpy_passes(layers: int, aligned: str) -> None:
    equal, overlap, compared, own, frame = _frames(layers, layers)
    got = _columns(equal, overlap, compared, own, frame, aligned, (layers, 8))
    want = _columns_numpy(equal, overlap, compared, own, frame, aligned, layers)
    assert got[S.ROUTE_EQUAL].type == pa.uint64()
    assert got[S.ROUTE_OVERLAP].type == pa.binary(layers)
    for name, values in want.items():
        assert got[name].to_pylist() == values, name
    assert got[S.ROUTE_TOP_K].to_pylist() == [8] * len(own)
    paired = np.array(want[S.ROUTE_PAIRED])
    assert (paired > PAIRED_SAME).any() and (paired == PAIRED_UNPAIRED).any()
    assert any(want[S.ROUTE_FLIP_BEFORE]) and not all(want[S.ROUTE_FLIP_BEFORE])


def test_place_rows_equals_the_numpy_passes() -> None:
    """Rows aligned with the response, from the last prompt position, and from absolute
    position 0 (the prompt's earlier rows not placed); a sequence without rows."""
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 50, 30)
    first = rng.choice([0, -1, -7], 30)
    rows = np.minimum(lengths - first, rng.integers(0, 60, 30))
    rows[3] = 0
    side = SideRoutes(
        np.zeros((int(rows.sum()), 2, 2), np.int16), offsets_from_lengths(rows), first, "c"
    )
    frame = offsets_frame(lengths)
    got = _frame_index(side, lengths, frame, "f", [str(i) for i in range(30)])
    want = _frame_index_numpy(side, frame)
    assert np.array_equal(got, want)
    assert (want >= 0).sum() > 200 and (want < 0).sum() > 30


@pytest.mark.parametrize(
    ("dtype", "width", "word"),
    [(np.uint8, 192, 8), (np.uint8, 12, 4), (np.int16, 3, 2), (np.uint8, 3, 1), (np.int64, 2, 8)],
)
def test_row_words_view_the_rows(dtype: type, width: int, word: int) -> None:
    ids = np.arange(5 * width, dtype=dtype).reshape(5, width)
    words = routing_kernels.row_words(ids)
    assert words.dtype.itemsize == word and words.shape == (5, width * ids.itemsize // word)
    assert np.shares_memory(words, ids)
    odd = np.zeros(ids.nbytes + 1, np.uint8)[1:]  # a buffer at an odd offset, as frombuffer's
    odd[:] = ids.view(np.uint8).reshape(-1)
    assert np.array_equal(routing_kernels.row_words(odd.view(dtype).reshape(5, width)), words)


@pytest.mark.parametrize("other", [np.int16, np.int64])
def test_compare_by_words_or_by_the_scan_equals_by_ids(other: type) -> None:
    """Rows of 3 layers x top-2 int16 (12 bytes: 3 words of 4), the second side reordered,
    differing or not recorded on some rows, of the same type or not: the comparison by words,
    by ids, and with the rows the scan found equal not read, agree."""
    rng = np.random.default_rng(2)
    n, layers, k = 500, 3, 2
    a = np.argsort(rng.random((n, layers, 30)), axis=2)[:, :, :k].astype(np.int16)
    b = a.copy()
    turned = rng.random(n) < 0.1
    b[turned] = b[turned][:, :, ::-1]  # the same sets, in another order
    b[rng.random(n) < 0.05, 2, 0] = 29
    a[rng.random(n) < 0.05] = -1  # not recorded on the first side
    b[rng.random(n) < 0.05] = -1  # on the second
    flat_a, flat_b = a.reshape(n, -1), b.reshape(n, -1).astype(other)
    of = np.arange(n, dtype=np.int64)
    dead = np.zeros(n, np.bool_)
    same = (flat_a == flat_b).all(axis=1)  # what the scan of the second side marks
    results = []
    for words, b_same in (
        (routing_kernels.compare_words(flat_a, flat_b), np.empty(0, np.bool_)),
        ((routing_kernels.NO_WORDS, routing_kernels.NO_WORDS), np.empty(0, np.bool_)),
        (routing_kernels.compare_words(flat_a, flat_b), same),
    ):
        out = np.zeros(n, np.uint64), np.zeros((n, layers), np.uint8), np.zeros(n, np.bool_)
        routing_kernels.compare_range(
            flat_a, of, dead, flat_b, of, dead, b_same, *words, layers, k, *out, 0, n
        )
        results.append(out)
    for got in results[1:]:
        for x, y in zip(results[0], got, strict=True):
            assert np.array_equal(x, y)
    equal, _, compared = results[0]
    assert same.sum() > n // 2 and (compared & (equal != 7)).sum() > 20
    assert (~compared).sum() > 20
