"""Inputs on object storage (``s3://``, ``gs://``) through ``pyarrow.fs``: listed like local
inputs (an object, a prefix searched recursively for dump suffixes, or a glob), then each object
copied to a local temporary file, one per worker at a time, and read like a local file. The
source keeps its URI as its path.

Credentials and endpoints come from the environment, as for any pyarrow or AWS tool
(``AWS_PROFILE``, ``AWS_ACCESS_KEY_ID``..., ``AWS_ENDPOINT_URL`` for an S3-compatible server;
Google application-default credentials for ``gs://``). Options in the URI's query string are
refused: they may hold secrets, and the URI is recorded in the catalog.
"""

from __future__ import annotations

import fnmatch
import glob
import re
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from mismatchctl.errors import InputError, UsageError
from mismatchctl.ingest.detect import SUFFIXES

SCHEMES = ("s3", "gs", "gcs")
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
HINT = (
    "check the URI; credentials come from the environment (AWS_PROFILE or AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL for an S3-compatible server; Google "
    "application-default credentials for gs://)."
)
COPY_CHUNK = 8 << 20


@dataclass(frozen=True)
class ObjectPath:
    """An input object, shown as its URI (``str``) and its last component (``name``)."""

    uri: str

    @property
    def name(self) -> str:
        return PurePosixPath(self.uri.split("://", 1)[1]).name

    def __str__(self) -> str:
        return self.uri


def is_remote(item: str | Path | ObjectPath) -> bool:
    """A URI with a scheme other than ``file``."""
    if isinstance(item, ObjectPath):
        return True
    match = _URI.match(str(item)) if isinstance(item, str) else None
    return bool(match) and match.group(1).lower() != "file"


def expand_remote(item: str) -> list[ObjectPath]:
    """The objects behind one input URI, sorted."""
    scheme, fs, path = _open(item)
    try:
        if glob.has_magic(path):
            found = _glob(fs, path)
            if not found:
                raise InputError(f"no object matches {item}", "check the pattern.")
        else:
            info = fs.get_file_info(path)
            if info.type == pafs.FileType.File:
                found = [path]
            elif info.type == pafs.FileType.Directory:
                found = sorted(
                    f.path
                    for f in fs.get_file_info(pafs.FileSelector(path, recursive=True))
                    if f.type == pafs.FileType.File and PurePosixPath(f.path).suffix in SUFFIXES
                )
                if not found:
                    raise InputError(
                        f"{item} holds no dump files (looked for {', '.join(SUFFIXES)})",
                        "point at the objects themselves.",
                    )
            else:
                raise InputError(f"no such object or prefix: {item}", HINT)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"cannot list {item}: {_first_line(exc)}", HINT) from None
    return [ObjectPath(f"{scheme}://{p}") for p in found]


def fetch(uri: str, directory: str | Path) -> Path:
    """Copy one object to ``directory`` (under its own name); the local copy."""
    _, fs, path = _open(uri)
    target = Path(directory) / PurePosixPath(path).name
    try:
        with fs.open_input_stream(path) as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst, COPY_CHUNK)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"cannot read {uri}: {_first_line(exc)}", HINT) from None
    return target


def _open(item: str) -> tuple[str, Any, str]:
    """(scheme, pyarrow filesystem, path inside it) of an input URI."""
    scheme = item.split("://", 1)[0].lower()
    if scheme not in SCHEMES:
        raise UsageError(
            f"input {item}: `{scheme}://` is not supported",
            f"use local paths or {', '.join(s + '://' for s in SCHEMES)} URIs (a mounted "
            "filesystem works too).",
        )
    if "?" in item:
        raise UsageError(
            f"input {item}: options in the URI are not accepted (they would be recorded in the "
            "catalog)",
            "set them in the environment instead, e.g. AWS_ENDPOINT_URL, AWS_PROFILE.",
        )
    try:
        fs, path = pafs.FileSystem.from_uri(item)
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise InputError(f"cannot open {item}: {_first_line(exc)}", HINT) from None
    return scheme, fs, path.rstrip("/")


def _glob(fs: Any, pattern: str) -> list[str]:
    """Objects matching a glob, component by component (``*`` does not cross ``/``)."""
    parts = pattern.split("/")
    fixed = next(i for i, p in enumerate(parts) if glob.has_magic(p))
    base = "/".join(parts[:fixed])
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    return sorted(
        info.path
        for info in infos
        if info.type == pafs.FileType.File and _matches(info.path.split("/"), parts)
    )


def _matches(path: list[str], pattern: list[str]) -> bool:
    return len(path) == len(pattern) and all(
        fnmatch.fnmatchcase(a, b) for a, b in zip(path, pattern, strict=True)
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
