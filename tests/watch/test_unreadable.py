"""Files that cannot be read or that vanish, under `watch` and `ingest`: a named error with a
hint (and `watch` goes on with the rest), "removed while it was being read" for a file deleted
mid-ingest, never a traceback; the store as it was.

The tests run as root, which reads a file whatever its mode (``chmod 000`` blocks nothing): an
unreadable file is made by patching the opening of that one file to raise ``PermissionError``,
and an unlistable directory by patching ``os.scandir`` for that one directory, as the kernel
would answer a user without the permission. A vanished file is deleted as the reader opens it,
or once its one batch is read (before its source is recorded): the two points where the audit
met ``FileNotFoundError``.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from mismatchctl import api
from mismatchctl.analysis.watch import FileNote
from mismatchctl.ingest import ready
from tests.helpers import FIXTURES, cli, tree_digest
from tests.watch_writer import write_step


def _deny(monkeypatch: pytest.MonkeyPatch, denied: Path) -> None:
    """Opening ``denied`` raises PermissionError, as for a user without read permission."""
    real = Path.open

    def opening(self: Path, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if self == denied:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", opening)


def test_watch_reports_an_unreadable_file_and_goes_on(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dumps = tmp_path / "dumps"
    write_step(dumps, 1, 0.02)
    locked = write_step(dumps, 2, 0.02)
    write_step(dumps, 3, 0.02)
    _deny(monkeypatch, locked)
    ran = cli("watch", str(dumps), "--run", "w", "--once", "--json")
    assert ran.code == 0, ran.err
    assert f"Bad file: cannot read {locked}: Permission denied" in ran.err
    assert "Hint: check the file's permissions" in ran.err
    assert sorted(api.open_store(store).run("w").steps) == [1, 3]
    assert "2 files ingested, 2 steps, 1 bad" in ran.err


def test_ready_names_an_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_step(tmp_path, 1, 0.02)
    _deny(monkeypatch, path)
    with pytest.raises(ready.Unreadable, match=r"cannot read .*: Permission denied"):
        ready.incomplete(path)


def test_an_unlistable_subdirectory_is_named_by_ingest_and_watch(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ingest DIR` refuses (its files would be left out unseen); `watch` says it and goes on."""
    dumps = tmp_path / "dumps"
    write_step(dumps, 1, 0.02)
    write_step(dumps / "rank1", 2, 0.02)
    real = os.scandir

    def scandir(path: object = ".") -> object:
        if isinstance(path, str | os.PathLike) and Path(path) == dumps / "rank1":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return real(path)  # type: ignore[call-overload]

    monkeypatch.setattr(os, "scandir", scandir)
    ran = cli("ingest", str(dumps), "--run", "i", "-q")
    assert ran.code == 1 and not store.exists()
    assert ran.err.startswith(
        f"Error: cannot list the directory {dumps / 'rank1'} (inside the input {dumps}): "
        "Permission denied"
    ), ran.err
    watched = cli("watch", str(dumps), "--run", "w", "--once")
    assert watched.code == 0, watched.err
    assert f"Not watched: cannot list the directory {dumps / 'rank1'}" in watched.err
    assert api.open_store(store).run("w").steps == [1]


def test_a_fifo_is_named_as_one(store: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "train_data_step3.jsonl"
    os.mkfifo(fifo)
    ran = cli("ingest", str(fifo), "--run", "x", "-q")
    assert ran.code == 1
    assert ran.err.startswith(f"Error: {fifo} is not a regular file (a FIFO)"), ran.err


@pytest.fixture(params=["before it is read", "after it is read"])
def vanishing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files named in the returned list are deleted mid-ingest, at the parametrized point."""
    from mismatchctl.ingest import run_ingest

    doomed: list[Path] = []
    if request.param == "before it is read":
        real_open = run_ingest.open_source

        def open_source(path: Path, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
            if path in doomed:
                path.unlink()
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(run_ingest, "open_source", open_source)
    else:
        real_canonicalize = run_ingest.canonicalize  # the file's one batch, read whole

        def canonicalize(batch, ctx):  # type: ignore[no-untyped-def]
            out = real_canonicalize(batch, ctx)
            for path in doomed:
                if ctx.source == str(path):  # this file's batch: the next files stay
                    path.unlink()
            return out

        monkeypatch.setattr(run_ingest, "canonicalize", canonicalize)
    return doomed


@pytest.mark.parametrize("name", ["step_00000002.parquet", "train_data_step3.jsonl"])
def test_ingest_of_a_file_removed_while_it_is_read(
    store: Path, tmp_path: Path, vanishing: list[Path], name: str
) -> None:
    assert cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "base", "-q").code == 0
    before = tree_digest(store)
    path = tmp_path / name
    if name.endswith(".jsonl"):
        shutil.copy(FIXTURES / name, path)
    else:
        shutil.copy(write_step(tmp_path / "src", 2, 0.02), path)
    vanishing.append(path)
    ran = cli("ingest", str(path), "--run", "x", "-q")
    assert ran.code == 1
    assert ran.err == (
        f"Error: {path} was removed while it was being read: nothing of it was ingested\n\n"
        "Hint: ingest it again if it is back (or ingest the file it was renamed to).\n"
    )
    assert tree_digest(store) == before


def test_watch_of_a_file_removed_while_it_is_ingested(
    store: Path, tmp_path: Path, vanishing: list[Path]
) -> None:
    dumps = tmp_path / "dumps"
    write_step(dumps, 1, 0.02)
    gone = write_step(dumps, 2, 0.02)
    write_step(dumps, 3, 0.02)
    vanishing.append(gone)
    events = list(api.watch(dumps, "w", store=store, once=True, explain=False).events())
    notes = [e for e in events if isinstance(e, FileNote)]
    assert [(n.kind, n.message) for n in notes] == [
        ("removed", f"{gone} was removed while it was being read: not ingested")
    ]
    assert api.open_store(store).run("w").steps == [1, 3]
    assert events[-1].ingested == 2 and events[-1].bad == 0
    assert cli("runs", "check", "w").code == 0
