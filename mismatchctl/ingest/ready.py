"""Whether a dump file a running job is writing is complete yet (what `watch` waits for).

A file is a *candidate* when its name has a suffix ingest reads and no part of its path under
the watched directory starts with a dot (``.step_3.parquet.tmp``, ``.staging/x.parquet``): temp
names (``*.tmp``, ``*.partial``: suffixes ingest does not read) and dotfiles are left alone until
they are renamed. A candidate is *complete* when its format's end marker reads:

- Parquet: the file ends in ``PAR1`` and its footer parses (the footer is written last);
- a torch zip (``.pt``/``.pth`` as ``torch.save`` writes them): the zip's central directory,
  written last, reads;
- a raw pickle (``.pkl``, ``.dp``): its opcodes parse up to a STOP at the end of the file
  (``pickletools``, a parser: nothing runs); a non-zip ``.pt`` (torch's legacy format): its first
  pickle parses to its STOP;
- JSON lines: the last line is terminated by a newline.

An empty file is not complete (a writer created it and has not written yet). Nothing here reads
values: a complete file with bad content is ingest's to refuse.
"""

from __future__ import annotations

import pickletools
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl.ingest.detect import SUFFIXES

PARQUET_MAGIC = b"PAR1"
ZIP_MAGIC = b"PK\x03\x04"


def is_candidate(path: Path, root: Path) -> bool:
    """A file ``watch`` considers: a suffix ingest reads, no dot-named part under ``root``."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        parts = (path.name,)
    return path.suffix.lower() in SUFFIXES and not any(p.startswith(".") for p in parts)


def candidates(root: Path) -> list[Path]:
    """The candidate files under ``root`` (recursively), sorted by path."""
    found = []
    for path in root.rglob("*"):
        try:
            if is_candidate(path, root) and path.is_file():
                found.append(path)
        except OSError:  # removed between the listing and the look
            continue
    return sorted(found)


def incomplete(path: Path) -> str | None:
    """Why ``path`` is not complete yet (its writer is still at it), or None when it is."""
    try:
        size = path.stat().st_size
        if size == 0:
            return "empty"
        kind = SUFFIXES.get(path.suffix.lower())
        if kind == "parquet":
            return _parquet(path, size)
        if kind == "jsonl":
            return _jsonl(path)
        if kind in ("pt", "pickle"):
            return _torch_or_pickle(path)
    except FileNotFoundError:
        return "removed"
    return None


def _parquet(path: Path, size: int) -> str | None:
    if size < 12:
        return "shorter than a Parquet footer"
    with path.open("rb") as fh:
        fh.seek(-4, 2)
        if fh.read(4) != PARQUET_MAGIC:
            return "no Parquet footer yet"
    try:
        pq.read_metadata(path)
    except (pa.ArrowException, OSError):
        return "the Parquet footer does not read yet"
    return None


def _jsonl(path: Path) -> str | None:
    with path.open("rb") as fh:
        fh.seek(-1, 2)
        return None if fh.read(1) == b"\n" else "the last line is not terminated yet"


def _torch_or_pickle(path: Path) -> str | None:
    with path.open("rb") as fh:
        head = fh.read(4)
    if head == ZIP_MAGIC:
        try:
            with zipfile.ZipFile(path):
                return None
        except (zipfile.BadZipFile, OSError):
            return "the zip directory of the torch file is not written yet"
    # torch's legacy (pre-zip) format is several pickles and raw storage bytes: its first
    # pickle must be whole; a raw pickle (.pkl, .dp) must end with its STOP
    return _pickle(path, trailing_ok=path.suffix.lower() in (".pt", ".pth"))


def _pickle(path: Path, trailing_ok: bool) -> str | None:
    with path.open("rb") as fh:
        try:
            last = None
            for opcode, _, _ in pickletools.genops(fh):
                last = opcode.name
            if last == "STOP" and (trailing_ok or not fh.read(1)):
                return None
        except (ValueError, EOFError, UnicodeDecodeError):
            pass
    return "the pickle does not reach its end yet"
