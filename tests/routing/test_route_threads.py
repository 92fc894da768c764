"""The routing kernels over ranges of rows on threads, and the second side checked only where it
differs from the first: the same verdicts, capture bugs and comparisons as one pass over every
row (the numpy references of ``test_route_decode`` and ``test_route_ingest``)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchctl import api
from mismatchctl import schema as S
from mismatchctl.errors import InputError
from mismatchctl.ingest import routing_kernels, routing_threads
from mismatchctl.ingest.routing_rows import RouteOptions
from tests.routing.test_route_decode import _scan_reference
from tests.routing.test_route_ingest import EXPERTS, _base, _check, _response_rows, _sequences


@pytest.fixture
def small_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranges of a few rows on three threads, so that tests of a few hundred rows use them."""
    monkeypatch.setattr(routing_threads, "MIN_ROWS", 7)
    monkeypatch.setattr(routing_threads, "threads", lambda: 3)


def test_ranges_cut_every_row_once() -> None:
    for n, parts in [
        (0, 2),
        (5, 2),
        (routing_threads.MIN_ROWS * 2, 2),
        (routing_threads.MIN_ROWS * 2 - 1, 2),
        (10**6, 3),
    ]:
        cut = routing_threads.ranges(n, parts)
        assert cut[0][0] == 0 and cut[-1][1] == n
        assert all(hi == lo for (_, hi), (lo, _) in itertools.pairwise(cut))
        assert len(cut) == max(1, min(parts, n // routing_threads.MIN_ROWS))
        assert len(cut) == 1 or min(hi - lo for lo, hi in cut) >= routing_threads.MIN_ROWS


def _sides(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two sides of 300 rows of 4 layers x top-3: the second equal to the first but on a tenth
    of the rows (other experts, the same sets reordered, or not recorded), with fills (a 0 fill)
    on both sides, on one side only, and on the first side where the second differs."""
    rng = np.random.default_rng(seed)
    a = np.argsort(rng.random((300, 4, 40)), axis=2)[:, :, :3].astype(np.int16)
    a[rng.random(300) < 0.05] = -1
    b = a.copy()
    for r in np.flatnonzero(rng.random(300) < 0.1):
        b[r] = np.argsort(rng.random((4, 40)), axis=1)[:, :3] if r % 2 else b[r][:, ::-1]
    b[rng.random(300) < 0.03] = -1
    a[[111, 112]] = 0  # fills on both sides
    b[[111, 112]] = 0
    a[140] = 7  # a fill on the first side, the second differing there
    b[190] = 0  # a fill on the second side only
    return a, b


def _scan(a: np.ndarray, b: np.ndarray, high: int) -> list[tuple[int, int, int, np.ndarray]]:
    """Both sides as ``routing_rows`` scans them: the first whole, the second with its twins
    (row r of each side at the same frame row, the first 50 rows of the second unpaired)."""
    out = []
    twin = np.arange(len(b), dtype=np.int64)
    twin[:50] = -1
    dead_a = np.zeros(len(a), np.bool_)
    none = np.empty(0, np.int64)
    for ids, rows, other, other_dead in ((a, none, a, dead_a), (b, twin, a, dead_a)):
        flat, dead = ids.reshape(len(ids), -1), dead_a if ids is a else np.zeros(len(ids), bool)
        words = routing_kernels.row_words(flat), routing_kernels.row_words(other.reshape(300, -1))
        same = np.zeros(len(rows), np.bool_)
        args = (flat, rows, *words, other_dead, 4, 3, high, dead, same)
        found = routing_threads.over_ranges(routing_kernels.scan_rows, len(ids), *args)
        code, row = next(
            ((c, r) for c, r, _ in found if c != routing_kernels.OK), (routing_kernels.OK, -1)
        )
        out.append((code, row, max(t for _, _, t in found), dead))
    return out


@pytest.mark.usefixtures("small_ranges")
@pytest.mark.parametrize("seed", [1, 2])
def test_scan_in_ranges_with_twins_equals_one_pass(seed: int) -> None:
    a, b = _sides(seed)
    spoiled = {"clean": (a, b)}
    for name, r in {"bad": 150, "neg": 200, "dup": 260, "partial": 230}.items():
        bb = b.copy()  # the second side spoiled where the first is fine: its twin differs
        bb[r] = a[r]
        bb[r, 2, 1] = {"bad": EXPERTS * 10, "neg": -2, "dup": bb[r, 2, 2], "partial": -1}[name]
        spoiled[name] = (a, bb)
        aa = b.copy()  # the first side spoiled, in a later range than the first
        aa[r] = bb[r]
        spoiled[f"first {name}"] = (aa, b)
    for name, (x, y) in spoiled.items():
        got = _scan(x, y, 40)
        for side, (code, row, _, dead) in zip((x, y), got, strict=True):
            ref_code, ref_row, ref_dead = _scan_reference(side, 40)
            assert (code, row) == (ref_code, ref_row), name
            if code != routing_kernels.OK:
                break  # the first side's error is raised before the second is scanned
            assert np.array_equal(dead, ref_dead), name
        if all(code == routing_kernels.OK for code, *_ in got):
            assert max(got[0][2], got[1][2]) == max(x.max(), y.max()), name


@pytest.mark.usefixtures("small_ranges")
def test_compare_in_ranges_equals_one_pass() -> None:
    a, b = _sides(3)
    n = len(a)
    rng = np.random.default_rng(3)
    a_of = np.where(rng.random(n) < 0.05, -1, np.arange(n))
    b_of = np.where(rng.random(n) < 0.05, -1, rng.permutation(n))
    a_dead, b_dead = rng.random(n) < 0.03, rng.random(n) < 0.03
    flat_a, flat_b = a.reshape(n, -1), b.reshape(n, -1)
    results = []
    for ranged in (False, True):
        equal, overlap, compared = (
            np.zeros(n, np.uint64),
            np.zeros((n, 4), np.uint8),
            np.zeros(n, bool),
        )
        args = (flat_a, a_of, a_dead, flat_b, b_of, b_dead, 4, 3, equal, overlap, compared)
        if ranged:
            words = routing_kernels.compare_words(flat_a, flat_b)
            ranged_args = (*args[:6], np.zeros(0, np.bool_), *words, *args[6:])
            routing_threads.over_ranges(routing_kernels.compare_range, n, *ranged_args)
        else:
            routing_kernels.compare_frames(*args)
        results.append((equal, overlap, compared))
    for one, ranged in zip(*results, strict=True):
        assert np.array_equal(one, ranged)
    assert results[0][2].sum() > n // 2 and (results[0][0] != 15).sum() > 10


def _dump(tmp_path: Path) -> Path:
    """Sequences with rows not recorded, the same sets reordered, a 0 fill on both sides and one
    on the engine's side alone, and a padded tail repeating the last real row (both sides)."""
    seqs = _sequences(n=14, seed=7)
    for i, s in enumerate(seqs):
        p, last = s["prompt"], int(np.flatnonzero(s["mask"])[-1])
        if i % 3 == 0:
            s["eng"][p + last + 1 : p + len(s["mask"])] = s["eng"][p + last]
            s["tr"][p + last + 1 : p + len(s["mask"])] = s["tr"][p + last]
        if i == 4:
            s["eng"][p + 2] = 0
            s["tr"][p + 2] = 0
        if i == 5:
            s["eng"][p + 1] = 3
    data = _base(seqs)
    data["rollout_routed_experts"] = [_response_rows(s, "eng").tolist() for s in seqs]
    data["trainer_routed_experts"] = [_response_rows(s, "tr").tolist() for s in seqs]
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table(data), path)
    return path


def _routing(store: Path) -> pa.Table:
    st = api.open_store(store)
    parts = st.parts("r", "routing")
    return pa.concat_tables(pq.read_table(st.part_path(p)) for p in parts).sort_by(
        [(S.SEQ, "ascending"), (S.POSITION, "ascending")]
    )


def test_an_ingest_in_ranges_equals_one_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _dump(tmp_path)
    got = []
    for ranged in (False, True):
        if ranged:
            monkeypatch.setattr(routing_threads, "MIN_ROWS", 5)
            monkeypatch.setattr(routing_threads, "threads", lambda: 4)
        store = tmp_path / f"store-{ranged}"
        res = api.ingest([path], "r", store=store, routes=RouteOptions(keep_routes=True))
        got.append((_routing(store), res.files[0].record.notes))
    assert got[0][0].equals(got[1][0])
    assert got[0][1] == got[1][1]
    bugs = [n for n in got[1][1] if "capture bug" in n]
    assert any("padded rows repeating" in n for n in bugs) and any("filled" in n for n in bugs)
    kept = got[1][0]
    for name, side in ((S.ROLLOUT_ROUTES, "eng"), (S.TRAINER_ROUTES, "tr")):
        rows = kept.column(name).to_pylist()  # the fills are not taken as routes
        assert [0] * 8 not in rows and [3] * 8 not in rows, side


@pytest.mark.usefixtures("small_ranges")
def test_an_ingest_in_ranges_against_the_reference_and_its_errors(tmp_path: Path) -> None:
    seqs = _sequences(n=10, seed=3)
    data = _base(seqs)
    data["rollout_routed_experts"] = [_response_rows(s, "eng").tolist() for s in seqs]
    data["trainer_routed_experts"] = [_response_rows(s, "tr").tolist() for s in seqs]
    for s in seqs:  # response rows only: the last prompt row is not recorded
        s["eng"][: s["prompt"]] = -1
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table(data), path)
    store = tmp_path / "store"
    api.ingest([path], "r", store=store, routes=RouteOptions(keep_routes=True))
    _check(_routing(store), seqs)
    data["trainer_routed_experts"][8][5][1] = [4, 4]  # equal to its twin but for this layer
    pq.write_table(pa.table(data), path)
    with pytest.raises(InputError, match=r"sample `s8`: column `trainer_routed_experts`, response "
                       r"index 5, layer 1: expected 2 distinct expert ids, found \[4, 4\]"):  # fmt: skip
        api.ingest([path], "bad", store=store)
