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
values: a complete file with bad content is ingest's to refuse. A file that cannot be read
(permissions, an I/O error) is :class:`Unreadable`, an error naming it.

JSON lines have no end marker, and their writers append: :func:`writer_signal` reads what the
writer says about a file besides its bytes. prime-rl touches ``STABLE`` in a step's directory
once every rank has flushed the step (``trainer/rl/token_export.py``): a file beside it is
complete (so is one of a step before a step marked so), and where the writer marks steps so,
a later step directory without it is waited for. A file or directory of a later step beside
a file's own (``train_data_step4.jsonl`` after
``train_data_step3.jsonl``, ``step_4/`` after ``step_3/``) says the writer moved on. Without
either, ``watch`` waits until the file has been left unchanged for ``--settle`` seconds.
"""

from __future__ import annotations

import os
import pickletools
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mismatchctl.display import file_label
from mismatchctl.errors import InputError
from mismatchctl.ingest.detect import SUFFIXES, walk_files

PARQUET_MAGIC = b"PAR1"
ZIP_MAGIC = b"PK\x03\x04"


def is_candidate(path: Path, root: Path) -> bool:
    """A file ``watch`` considers: a suffix ingest reads, no dot-named part under ``root``."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        parts = (path.name,)
    return path.suffix.lower() in SUFFIXES and not any(p.startswith(".") for p in parts)


class Unreadable(InputError):
    """A candidate that cannot be read (its permissions, an I/O error)."""


def unreadable(path: Path, exc: OSError) -> Unreadable:
    return Unreadable(
        f"cannot read {file_label(path)}: {exc.strerror or exc}",
        "check the file's permissions (it is tried again when it changes).",
    )


def candidates(root: Path, unlisted: list[Path] | None = None) -> list[Path]:
    """The candidate files under ``root`` (recursively), sorted by path; a directory that
    cannot be listed is added to ``unlisted`` (when given) and its files are not seen."""

    def note(exc: OSError) -> None:
        if unlisted is not None and exc.filename is not None:
            unlisted.append(Path(exc.filename))

    return [path for path in walk_files(root, note) if is_candidate(path, root)]


def incomplete(path: Path) -> str | None:
    """Why ``path`` is not complete yet (its writer is still at it), or None when it is;
    :class:`Unreadable` when it cannot be read."""
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
    except OSError as exc:
        raise unreadable(path, exc) from None
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


STABLE = "STABLE"  # prime-rl's mark of a finished step directory
_STEP = re.compile(r"(?:global_step|step|rollout_id|rollout|iter|iteration)[_\-]?(\d{1,18})", re.I)


@dataclass(frozen=True)
class Signal:
    """What a JSON lines file's writer says about it: ``complete``, and why."""

    complete: bool
    why: str


def writer_signal(path: Path) -> Signal | None:
    """The writer's word on a JSON lines file (its step's ``STABLE``, a later step beside it),
    or None when it says nothing (then the file is judged by how long it has been left
    unchanged)."""
    step_dir = path.parent
    if (step_dir / STABLE).exists():
        return Signal(True, f"its directory holds the writer's {STABLE} marker")
    marked = [step for other, step in _siblings(step_dir) if (other / STABLE).exists()]
    own = _STEP.search(step_dir.name)
    if marked and own is not None and max(marked) > int(own.group(1)):
        return Signal(True, f"the writer marked a later step {STABLE}")
    if marked:  # the writer marks its finished steps: this one is not yet
        return Signal(False, f"waiting for the writer's {STABLE} marker in its step directory")
    for holder in (path, step_dir):  # a file named by its step, or its step's directory
        match = _STEP.search(holder.name)
        if match is None:
            continue
        later = [p for p, step in _siblings(holder) if step > int(match.group(1))]
        if later:
            return Signal(True, f"a later step is written ({min(later).name})")
        return None
    return None


def _siblings(holder: Path) -> list[tuple[Path, int]]:
    """The entries beside ``holder`` named like it with another step number, with that step;
    none when its name holds no step."""
    match = _STEP.search(holder.name)
    if match is None:
        return []
    prefix, suffix = holder.name[: match.start(1)], holder.name[match.end(1) :]
    try:
        names = os.listdir(holder.parent)
    except OSError:
        return []
    out = []
    for name in names:
        if name == holder.name or len(name) <= len(prefix) + len(suffix):
            continue
        digits = name[len(prefix) : len(name) - len(suffix)]
        if name.startswith(prefix) and name.endswith(suffix) and _digits(digits):
            out.append((holder.parent / name, int(digits)))
    return out


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 18
