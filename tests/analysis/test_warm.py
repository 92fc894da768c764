"""``ingest --warm`` (``analysis/warm.py``): after it, ``report RUN``, ``explain RUN`` and
``diagnose RUN`` read no token part and print the same bytes as a cold read; a second warm of a
kept run reads nothing; with the part cache off it reads nothing and says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mismatchctl.engines import part_cache
from mismatchctl.ingest import source as ingest_source
from mismatchctl.store import parts as store_parts
from tests.helpers import cli, multi_gpu_dump

VIEWS = (("report", "a"), ("explain", "a"), ("diagnose", "a"))


@pytest.fixture
def dump(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A dump that makes several small parts."""
    monkeypatch.setattr(store_parts, "PART_TOKENS", 4000)
    monkeypatch.setattr(ingest_source, "BATCH_TOKENS", 4000)
    path = tmp_path / "a.parquet"
    multi_gpu_dump(path, seed=3)
    return path


def _view(store: Path, *args: str) -> str:
    ran = cli(*args, "--store", str(store), "--json", "-", "-q")
    assert ran.code in (0, 3), ran.err  # diagnose exits 3 when a check fails
    return ran.out


def test_after_a_warm_ingest_the_views_read_no_part_and_say_the_same(
    tmp_path: Path,
    dump: Path,
    fresh_part_cache: Path,
    part_reads: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = tmp_path / "store"
    ran = cli("ingest", str(dump), "--run", "a", "--store", str(store), "--warm", "--json", "-q")
    assert ran.code == 0, ran.err
    warmed = json.loads(ran.out)["warm"]
    assert warmed["run"] == "a" and warmed["cache"] == str(fresh_part_cache)
    assert sorted(warmed["seconds"]) == ["diagnose", "explain", "report"]
    parts = len(set(part_reads))
    assert parts >= 3 and len(part_reads) == 3 * parts  # each part read once per view, no more
    part_reads.clear()
    warm = {view: _view(store, view, run) for view, run in VIEWS}
    assert part_reads == []  # every view found every part's states
    monkeypatch.setenv(part_cache.MB_ENV, "0")
    for view, run in VIEWS:
        assert _view(store, view, run) == warm[view], view
    assert len(part_reads) == 3 * parts  # the cold reads did read the tokens


def test_warming_a_kept_run_again_reads_nothing(
    tmp_path: Path, dump: Path, fresh_part_cache: Path, part_reads: list[str]
) -> None:
    store = tmp_path / "store"
    assert cli("ingest", str(dump), "--run", "a", "--store", str(store), "--warm", "-q").code == 0
    part_reads.clear()
    # the same content again: a no-op ingest, and the warm finds every state kept
    ran = cli("ingest", str(dump), "--run", "a", "--store", str(store), "--warm")
    assert ran.code == 0, ran.err
    assert part_reads == []
    assert "Part cache warmed for report, explain and diagnose of a" in ran.err


def test_with_the_cache_off_warm_reads_nothing_and_says_so(
    tmp_path: Path, dump: Path, part_reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(part_cache.MB_ENV, "0")
    store = tmp_path / "store"
    ran = cli("ingest", str(dump), "--run", "a", "--store", str(store), "--warm", "--json")
    assert ran.code == 0, ran.err
    assert part_reads == []
    assert json.loads(ran.out)["warm"] == {"run": "a", "cache": None, "seconds": {}}
    assert "Warning: --warm: the part cache is off" in ran.err
