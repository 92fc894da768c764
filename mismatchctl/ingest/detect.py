"""Finding the dump files behind the inputs, and telling their formats apart."""

from __future__ import annotations

import errno
import glob
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pyarrow.parquet as pq

from mismatchctl import schema as S
from mismatchctl.display import file_label
from mismatchctl.errors import InputError, UsageError
from mismatchctl.ingest.arrow_values import is_list_type
from mismatchctl.ingest.column_roles import SEQUENCE_NAMES, TOKEN_NAMES
from mismatchctl.ingest.jsonl import parsed
from mismatchctl.ingest.one_sided import refuse_one_sided
from mismatchctl.ingest.restricted_pickle import first_global
from mismatchctl.ingest.verl_dataproto import DATAPROTO
from mismatchctl.options import (
    FORMAT_NEMO,
    FORMAT_PRIME,
    FORMAT_SEQUENCE,
    FORMAT_SLIME,
    FORMAT_TOKEN,
    FORMAT_VERL,
    FORMATS,
)

SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".pt": "pt", ".pth": "pt", ".jsonl": "jsonl"}
SUFFIXES |= {".pkl": "pickle", ".pickle": "pickle", ".dp": "pickle"}


def expand_inputs(inputs: Iterable[str]) -> list[Path]:
    """Files, directories (searched recursively for known suffixes) and globs -> sorted files."""
    files: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found = dump_files(path, item)
            if not found:
                raise InputError(
                    f"directory {item} holds no dump files (looked for {', '.join(SUFFIXES)})",
                    "point at the files themselves, or pass --format with explicit files.",
                )
            files.extend(found)
        elif path.is_file():
            files.append(path)
        elif glob.has_magic(item):
            matched = sorted(Path(p) for p in glob.glob(item, recursive=True) if Path(p).is_file())
            if not matched:
                raise InputError(f"no file matches {item}", "check the pattern.")
            files.extend(matched)
        elif path.exists():
            raise InputError(
                f"{file_label(item)} is not a regular file ({_kind(path)})",
                "name the dump files themselves: a pipe or device has no end to read to.",
            )
        else:
            raise InputError(f"no such file or directory: {item}", "check the path.")
    if not files:
        raise InputError("no input files given", "name dump files, directories or globs.")
    return list(dict.fromkeys(files))


def _kind(path: Path) -> str:
    mode = path.stat().st_mode
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file"


def walk_files(root: Path, on_error: Callable[[OSError], None]) -> list[Path]:
    """The regular files under ``root`` with a suffix ingest reads (recursively, sorted); a
    directory that cannot be listed goes to ``on_error`` (``Path.rglob`` skips it silently)."""
    found = []
    for top, dirs, names in os.walk(root, onerror=on_error):
        dirs.sort()
        for name in names:
            path = Path(top) / name
            if path.suffix.lower() in SUFFIXES and path.is_file():
                found.append(path)
    return sorted(found)


def dump_files(root: Path, item: str) -> list[Path]:
    """``walk_files`` of an input directory: a subdirectory that cannot be listed is an error
    naming it (its files would be left out of the run unseen)."""

    def refuse(exc: OSError) -> None:
        where = file_label(exc.filename or root)
        raise InputError(
            f"cannot list the directory {where} (inside the input {file_label(item)}): "
            f"{exc.strerror or exc}",
            "check its permissions, or name the files to ingest themselves.",
        )

    return walk_files(root, refuse)


def detect_format(
    path: Path, mapping: Mapping[str, str], forced: str | None, label: str | None = None
) -> str:
    """The format of ``path``; ``label`` names it in messages (default: the path as given)."""
    label = label or file_label(path)
    if forced is not None:
        if forced not in FORMATS:
            raise UsageError(
                f"unknown format `{forced}` (known: {', '.join(FORMATS)})",
                "pass one of the known formats to --format, or leave it out to detect it.",
            )
        return forced
    kind = SUFFIXES.get(path.suffix.lower())
    if kind == "parquet":
        return _parquet_layout(path, mapping, label)
    if kind == "pt":  # a torch archive, or a raw pickle (verl's save_to_disk)
        return FORMAT_VERL if first_global(path) == DATAPROTO else FORMAT_SLIME
    if kind == "pickle":
        return _pickle_kind(path, label)
    if kind == "jsonl":
        return _jsonl_kind(path, label)
    raise InputError(
        f"cannot tell the format of {label} (suffix `{path.suffix}`)",
        f"pass --format (one of {', '.join(FORMATS)}).",
    )


def _parquet_layout(path: Path, mapping: Mapping[str, str], label: str) -> str:
    """Sequence layout when the rollout logprob column is a list, token layout when scalar."""
    try:
        schema = pq.read_schema(path)
    except Exception as exc:
        raise unreadable(label, "Parquet", exc) from None
    names = schema.names
    refuse_one_sided(path, names, mapping)
    candidates = [mapping[S.ROLE_ROLLOUT]] if S.ROLE_ROLLOUT in mapping else []
    candidates += list(SEQUENCE_NAMES[S.ROLE_ROLLOUT]) + list(TOKEN_NAMES[S.ROLE_ROLLOUT])
    for name in candidates:
        if name in names:
            return FORMAT_SEQUENCE if is_list_type(schema.field(name).type) else FORMAT_TOKEN
    raise InputError(
        f"no rollout logprob column in {label} (found: {', '.join(names)})",
        "name it with --map rollout=<column> (and the trainer side with --map trainer=<column>).",
    )


def _jsonl_kind(path: Path, label: str) -> str:
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if raw.strip():
                return _jsonl_line_kind(parsed(raw, label, number), label)
    raise InputError(f"{label} is empty", "remove it from the inputs.")


PRIME_SIDES = ("inference_logprobs", "trainer_logprobs")


def _jsonl_line_kind(obj: object, label: str) -> str:
    """The format of a JSON lines file from its first line: NeMo-RL's keys, or prime-rl's."""
    if isinstance(obj, dict) and "generation_logprobs" in obj:
        return FORMAT_NEMO
    keys = ", ".join(map(str, obj)) if isinstance(obj, dict) else type(obj).__name__
    prime = [k for k in PRIME_SIDES if isinstance(obj, dict) and k in obj]
    if len(prime) == 2:
        return FORMAT_PRIME
    if prime:  # one side of a prime-rl token export: name the missing one, with its hint
        missing = next(k for k in PRIME_SIDES if k not in prime)
        raise InputError(
            f"{label}: a prime-rl token export line (it has `{prime[0]}`) without `{missing}` "
            f"(found: {keys})",
            f"prime-rl writes both sides with enable_token_export = true; name the key of the "
            f"other side with --format {FORMAT_PRIME} --map "
            f"{'trainer' if missing == 'trainer_logprobs' else 'rollout'}=<key>.",
        )
    raise InputError(
        f"{label}: JSON lines without `generation_logprobs` (NeMo-RL) or `{PRIME_SIDES[0]}` and "
        f"`{PRIME_SIDES[1]}` (prime-rl) (found: {keys})",
        f"for dumps with other key names pass --format {FORMAT_NEMO} or --format {FORMAT_PRIME} "
        "and --map.",
    )


def _pickle_kind(path: Path, label: str) -> str:
    name = first_global(path)
    if name == DATAPROTO:
        return FORMAT_VERL
    found = f"it names `{name}` first" if name else "no class found near its start"
    raise InputError(
        f"{label} is not a verl DataProto pickle ({found}; expected `{DATAPROTO}`)",
        "pickles are read only as verl's DataProto.save_to_disk files; export other dumps to "
        "Parquet, or pass --format if this is one of the known formats.",
    )


class RemovedWhileRead(InputError):
    """An input that was removed (or renamed away) while it was being read."""


def removed_while_read(label: str) -> RemovedWhileRead:
    return RemovedWhileRead(
        f"{label} was removed while it was being read: nothing of it was ingested",
        "ingest it again if it is back (or ingest the file it was renamed to).",
    )


def unreadable(label: str, what: str, exc: Exception) -> InputError:
    """Why an input could not be read as ``what``: removed meanwhile, not readable (its
    permissions, an I/O error), or content that does not parse (truncated or corrupt).
    ``label``: the file as messages name it (``display.file_label``)."""
    if isinstance(exc, FileNotFoundError):
        return removed_while_read(label)
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM):
        return InputError(
            f"cannot read {label}: {exc.strerror or 'permission denied'}",
            "check the file's permissions.",
        )
    if isinstance(exc, OSError) and exc.errno in (errno.EIO, errno.EISDIR, errno.ENXIO):
        return InputError(
            f"cannot read {label}: {exc.strerror}",
            "check the file and the disk it is on, then ingest it again.",
        )
    first = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    return InputError(
        f"cannot read {label} as {what}: {first}",
        "the file is truncated or corrupt; re-export it, or leave it out of the inputs.",
    )
