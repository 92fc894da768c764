"""A store (or an output file) on a full disk or a read-only file system: each writing command
says what is full or read-only and where, with a hint; the store stays as it was; an output
written with --html or --json is whole or absent (written to a temporary name, then renamed).

Two ways to make the fault: the file system call patched to fail as the kernel fails it
(``OSError(ENOSPC)`` from the Parquet writer, ``EROFS`` opening the lock, SQLite's "database
or disk is full"), which runs anywhere; and, where this process may mount file systems (root
with CAP_SYS_ADMIN), a real 1 MB tmpfs filled up, then remounted read-only.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers import FIXTURES, cli, tree_digest
from tests.watch_writer import write_step

GOOD, OTHER = FIXTURES / "sequence.parquet", FIXTURES / "token.parquet"


@pytest.fixture
def seeded(store: Path) -> Path:
    assert cli("ingest", str(GOOD), "--run", "a", "-q").code == 0
    return store


def _eio(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def _read_only_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening the store's lock for writing fails as on a read-only file system."""
    from mismatchctl.store import lock

    real = lock.os.open

    def opening(path: object, flags: int, *args: object) -> int:
        if str(path).endswith(lock.LOCK_NAME):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(lock.os, "open", opening)


@pytest.mark.parametrize(
    "command",
    [
        ["ingest", str(OTHER), "--run", "b", "-q"],
        ["runs", "rm", "a", "--yes"],
        ["ingest-metrics", str(FIXTURES.parent / "metrics" / "console.jsonl"), "--run", "a"],
        ["watch", "DUMPS", "--run", "w", "--once", "-q"],
    ],
)
def test_a_read_only_store_is_said_to_be(
    seeded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    write_step(tmp_path / "dumps", 1, 0.02)
    command = [str(tmp_path / "dumps") if x == "DUMPS" else x for x in command]
    before = tree_digest(seeded)
    _read_only_lock(monkeypatch)
    ran = cli(*command)
    assert ran.code == 1, ran.err
    assert ran.err.startswith(
        f"Error: the store {seeded} is on a read-only file system: cannot write while taking "
        f"its write lock ({seeded / '.lock'}); the store is as it was"
    ), ran.err
    assert "Hint: commands that only read (report, compare, runs...) work on it" in ran.err
    assert tree_digest(seeded) == before
    assert cli("report", "a", "-q").code == 0  # reading needs no write


def test_tokens_with_a_tokenizer_on_a_read_only_store_shows_the_text(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--tokenizer is remembered for the run; on a read-only store it is not, and says so."""
    import pyarrow as pa

    table = pa.table({
        "step": [0], "uid": ["s"], "responses": [[104, 105]], "response_mask": [[1, 1]],
        "rollout_log_probs": [[-0.1, -0.2]], "old_log_probs": [[-0.5, -0.9]],
    })  # fmt: skip
    pq.write_table(table, tmp_path / "d.parquet")
    assert cli("ingest", str(tmp_path / "d.parquet"), "--run", "t", "-q").code == 0
    before = tree_digest(store)
    _read_only_lock(monkeypatch)
    ran = cli("tokens", "t", "--tokenizer", "bytes")
    assert ran.code == 0, ran.err
    assert "h[i]" in ran.out and "[h]i" in ran.out  # bytes 104, 105 decoded
    assert "the tokenizer is not remembered (the store" in ran.out + ran.err
    assert tree_digest(store) == before


def test_a_full_disk_while_parts_are_written_is_the_store_s(
    seeded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC from the Parquet writer (on its lane thread): never "cannot read the input"."""
    before = tree_digest(seeded)

    def full(self: object, *args: object, **kwargs: object) -> None:
        raise _eio(errno.ENOSPC)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", full)
    ran = cli("ingest", str(OTHER), "--run", "b", "-q")
    assert ran.code == 1
    assert ran.err.startswith(
        f"Error: no space left on the disk of the store {seeded} while writing the parts of "
        "the ingest; the store is as it was"
    ), ran.err
    assert f"Hint: free space on that disk (`df -h {seeded}` shows it)" in ran.err
    assert "cannot read" not in ran.err and "corrupt" not in ran.err
    assert tree_digest(seeded) == before


def test_a_full_catalog_is_the_store_s(seeded: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mismatchctl.store import catalog

    def full(*args: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    before = tree_digest(seeded)
    monkeypatch.setattr(catalog, "insert_part", full)
    ran = cli("ingest", str(OTHER), "--run", "b", "-q")
    assert ran.code == 1
    assert ran.err.startswith(
        f"Error: no space left on the disk of the store {seeded} while committing the ingest"
    ), ran.err
    assert tree_digest(seeded) == before


@pytest.mark.parametrize("option", ["--html", "--json"])
def test_an_output_on_a_full_disk_leaves_no_file(
    seeded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    from mismatchctl.render import output

    class Full:
        def __init__(self, fd: int, *args: object, **kwargs: object) -> None:
            self.fd = fd

        def __enter__(self) -> Full:
            return self

        def __exit__(self, *exc: object) -> None:
            os.close(self.fd)

        def write(self, text: str) -> int:
            raise _eio(errno.ENOSPC)

    out = tmp_path / "out" / "page"
    out.parent.mkdir()
    monkeypatch.setattr(output.os, "fdopen", Full)
    ran = cli("report", "a", option, str(out), "-q")
    assert ran.code == 1
    assert ran.err == (
        f"Error: {option} {out}: cannot write it: the disk is full; nothing was written there"
        "\n\nHint: free space on that disk, or name a file on another one.\n"
    )
    assert list(out.parent.iterdir()) == []  # no empty page, no temporary file


def test_an_output_replaces_the_file_whole(seeded: Path, tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    out.write_text("old")
    assert cli("report", "a", "--html", str(out), "-q").code == 0
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html", "store"]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MB tmpfs, where this process may mount one."""
    mount = tmp_path / "small"
    mount.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_real_full_then_read_only_tmpfs(tmpfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmpfs / "store"
    monkeypatch.setenv("MISMATCHCTL_STORE", str(store))
    assert cli("ingest", str(GOOD), "--run", "a", "-q").code == 0
    before = tree_digest(store)
    filler = tmpfs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:  # every byte left
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    full = cli("ingest", str(OTHER), "--run", "b", "-q")
    assert full.code == 1
    assert full.err.startswith(f"Error: no space left on the disk of the store {store}"), full.err
    page = cli("report", "a", "--html", str(tmpfs / "page.html"), "-q")
    assert page.code == 1 and "the disk is full" in page.err
    assert not (tmpfs / "page.html").exists() and tree_digest(store) == before
    filler.unlink()
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    read_only = cli("ingest", str(OTHER), "--run", "b", "-q")
    assert read_only.code == 1
    assert read_only.err.startswith(f"Error: the store {store} is on a read-only file system")
    assert cli("report", "a", "-q").code == 0 and tree_digest(store) == before
