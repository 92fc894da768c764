"""A file's fingerprint and its read: a file that no source of the run (nor a file before it in
the ingest) has the size of cannot be skipped, so it is read while it is hashed; one that may
repeat a source is hashed first, and skipped without being read when it does."""

from __future__ import annotations

import hashlib
import shutil
import threading
from pathlib import Path

import pytest

import mismatchctl
from mismatchctl.ingest import run_ingest
from tests.helpers import FIXTURES, cli, tree_digest

GOOD = FIXTURES / "sequence.parquet"
NEMO = sorted(FIXTURES.glob("train_data_step*.jsonl"))


def _sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_new_file_is_read_while_it_is_hashed(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hash waits until the read has begun (it would wait forever if the read waited for
    the hash); the fingerprint stored is the file's SHA-256 all the same."""
    reading = threading.Event()
    hashed_during_read: list[bool] = []
    content_of, ingest_source = run_ingest.content_of, run_ingest.ingest_source

    def slow_hash(path: Path, label: str | None = None) -> run_ingest.Content:
        hashed_during_read.append(reading.wait(timeout=30))
        return content_of(path, label)

    def read(*args: object, **kwargs: object) -> run_ingest.Ingested:
        reading.set()
        return ingest_source(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(run_ingest, "content_of", slow_hash)
    monkeypatch.setattr(run_ingest, "ingest_source", read)
    assert cli("ingest", str(GOOD), "--run", "r", "-q").code == 0
    assert hashed_during_read == [True]
    (source,) = mismatchctl.open_store(store).run("r").sources
    assert source.fingerprint == _sha256(GOOD)
    assert source.size == GOOD.stat().st_size


def test_a_file_of_a_known_size_is_hashed_first_and_skipped_unread(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli("ingest", str(GOOD), "--run", "r", "-q").code == 0
    copy = tmp_path / "renamed.parquet"
    shutil.copy(GOOD, copy)

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("a file with the content of a source of the run was read")

    monkeypatch.setattr(run_ingest, "ingest_source", never)
    before = tree_digest(store)
    again = cli("ingest", str(copy), "--run", "r", "-q")
    assert again.code == 0 and "already ingested" in again.err
    assert tree_digest(store) == before


def test_files_of_one_size_in_one_ingest_the_second_hashed_first(
    store: Path, tmp_path: Path
) -> None:
    """The second file has the first's size but not its content: hashed first (it might have
    been a duplicate), then ingested; each source keeps its own fingerprint."""
    first, second = tmp_path / "a" / NEMO[0].name, tmp_path / "b" / NEMO[0].name
    for path in (first, second):
        path.parent.mkdir()
        shutil.copy(NEMO[0], path)
    second.write_text(second.read_text().replace("12 * 7", "12 * 8", 1))  # the prompt's text
    assert first.stat().st_size == second.stat().st_size
    assert _sha256(first) != _sha256(second)
    assert cli("ingest", str(first), str(second), "--run", "r", "-q").code == 0
    sources = mismatchctl.open_store(store).run("r").sources
    assert sorted(s.fingerprint for s in sources) == sorted([_sha256(first), _sha256(second)])


def test_a_file_changed_while_it_was_hashed_beside_the_read_is_refused(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    content_of = run_ingest.content_of

    def touched(path: Path, label: str | None = None) -> run_ingest.Content:
        seen = content_of(path, label)  # as if a writer had touched the file meanwhile
        return run_ingest.Content(seen.fingerprint, seen.size, seen.mtime_ns + 1)

    assert cli("ingest", str(NEMO[0]), "--run", "base", "-q").code == 0
    before = tree_digest(store)
    monkeypatch.setattr(run_ingest, "content_of", touched)
    ran = cli("ingest", str(GOOD), "--run", "r", "-q")
    assert ran.code == 1
    assert ran.err.startswith(f"Error: {GOOD} changed while it was being read"), ran.err
    assert "\nHint: " in ran.err
    assert tree_digest(store) == before  # nothing of it kept
