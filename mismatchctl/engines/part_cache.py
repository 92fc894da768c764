"""The part cache: what the engines compute from one token part (every pass's groups, every
extra's state), kept on disk between commands, so that a second view of the same parts reads
the states instead of the tokens.

A part has one entry per piece of what is computed from it: the passes' groups, and each
extra's state on its own, so that two views that share a part of their work share its entries
(``diagnose A`` then ``diagnose A --baseline B``: only the pieces that differ are computed). An
entry's key is a sha256 over the part's identity (its task; for a local file its size and
modification time, and those of its sequence files and routing twin), the piece (the passes,
or one extra, with the bin edges, the row filter and the binning: an explicit description, the
same in every process) and a digest of the package's own source (with the versions of Python,
numpy, pyarrow and numba), so that neither another part, another question nor another version
of the code ever finds it. An extra may keep its state in a form that outlives its read's
labels (``cache_state``/``from_cache``: the cubes' steps and gpus by label, so that a run that
gains a step keeps its old parts' states). Parts are immutable (uuid-named files: a rewritten
run gets new part files), so an entry stays true as long as its part exists. A value that
cannot be described stably (a function, a lock, an object without fields) leaves its piece
uncached: correctness first.

The cache lives outside the store on purpose: a store is input (shared, read-only, a bucket,
possibly hostile) and a pickle is only ever read from this user's own directory, where this
user's processes wrote it (an entry owned by another user is never unpickled). Where:
``$MISMATCHCTL_CACHE_DIR``, else ``$XDG_CACHE_HOME/mismatchctl/parts``, else
``~/.cache/mismatchctl/parts``; ``$MISMATCHCTL_CACHE_MB`` caps it (default 2048; ``0`` turns it
off), the least recently used entries evicted after each read that wrote entries (one scan of
the directory, not one per entry). A directory that cannot be created or written turns the
cache off for the process; the numbers never change.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import os
import pickle
import struct
import sys
import threading
import time
import types
import zlib
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path, PurePath
from typing import Any

import numpy as np
import pyarrow as pa

from mismatchctl.engines.plan import Binning, PartTask, Pass, RowFilter
from mismatchctl.errors import UsageError

DIR_ENV = "MISMATCHCTL_CACHE_DIR"
MB_ENV = "MISMATCHCTL_CACHE_MB"
DEFAULT_MB = 2048
SUFFIX = ".part"
# what an entry starts with: the format's name and version, then its key, then the pickle's
# size and the CRC-32 of the compressed bytes after it (a damaged entry is told, not unpickled)
MAGIC = b"mismatchctl part cache 1\n"
_HEAD = struct.Struct("<QI")
STALE_TEMP_SECONDS = 3600.0  # a temporary file this old was left by a process that died
_MAX_DEPTH = 64  # a description nested deeper is treated as a cycle: not described

_off: set[str] = set()  # directories found unwritable by this process
_written = [0]  # entries this process wrote since it last evicted
_lock = threading.Lock()


class Unstable(Exception):
    """A value without a description that is the same in every process."""


def cap_bytes() -> int:
    """The cap in bytes (``$MISMATCHCTL_CACHE_MB``, default 2048 MB; 0: the cache is off)."""
    raw = os.environ.get(MB_ENV, "").strip()
    if not raw:
        return DEFAULT_MB << 20
    try:
        mb = int(raw)
    except ValueError:
        mb = -1
    if mb < 0:
        raise UsageError(
            f"${MB_ENV} is `{raw}`: expected a whole number of megabytes (0 or more)",
            f"set it to the part cache's size in MB (0 turns the cache off), or unset it for "
            f"{DEFAULT_MB}.",
        )
    return mb << 20


def directory() -> Path | None:
    """Where the entries are kept, or None when the cache is off."""
    if cap_bytes() == 0:
        return None
    given = os.environ.get(DIR_ENV, "").strip()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    if given:
        path = Path(given).expanduser()
    elif xdg and os.path.isabs(xdg):  # a relative $XDG_CACHE_HOME is to be ignored (the spec)
        path = Path(xdg) / "mismatchctl" / "parts"
    else:
        try:
            path = Path.home() / ".cache" / "mismatchctl" / "parts"
        except RuntimeError:  # no home directory to be found: no cache
            return None
    return None if str(path) in _off else path


def pieces(
    passes: Sequence[Pass],
    edges: np.ndarray,
    rows: RowFilter | None,
    extras: Sequence[object],
    binning: Binning,
) -> list[bytes | None]:
    """The digests of what a read computes from each part, one per entry: the passes' groups
    first (None without passes: nothing to keep), then each extra's state (keyed by the extra's
    own description, the edges, the row filter and the binning, and by the passes when it may
    reuse the engine's turn runs, ``uses_runs``: its sums are then the runs'), each with the
    package's source digest; a piece is None when the cache is off or it cannot be described
    stably (not cached: computed on every read)."""
    if directory() is None:
        return [None] * (1 + len(extras))
    common = (edges, rows, binning)
    out = [_digest(("passes", list(passes), *common)) if passes else None]
    for extra in extras:
        runs = list(passes) if passes and uses_runs(extra) else []
        out.append(_digest(("extra", extra, runs, *common)))
    return out


def uses_runs(extra: object) -> bool:
    """Whether an extra may read the engine's turn runs (``PartKeys.runs``, ``by_run``), so
    that its state follows the passes read with it (an extra says False when it does not)."""
    return bool(getattr(extra, "uses_runs", True))


def _digest(value: Any) -> bytes | None:
    try:
        text = describe(value)
    except Unstable:
        return None
    return hashlib.sha256(source_digest() + text.encode()).digest()


def key(task: PartTask, piece: bytes | None) -> str | None:
    """The entry's name of one part's ``piece`` (a digest of ``pieces``); None: not cached (a
    file of the part missing: the read reports it)."""
    return keys(task, [piece])[0]


def keys(task: PartTask, digests: Sequence[bytes | None]) -> list[str | None]:
    """The entries' names of one part's pieces (its identity described once)."""
    if all(d is None for d in digests):
        return [None] * len(digests)
    try:
        ident = identity(task).encode()
    except (OSError, Unstable):
        return [None] * len(digests)
    return [None if d is None else hashlib.sha256(d + ident).hexdigest() for d in digests]


def identity(task: PartTask) -> str:
    """The part's task with its local files named by absolute path, and each
    one's size and modification time (a part in a bucket: its name alone, uuid-named)."""

    def absolute(name: str) -> str:
        return name if "://" in name else os.path.abspath(name)

    files = [task.path, *task.sequences, *([task.routing] if task.routing else [])]
    stats = []
    for name in files:
        if "://" not in name:
            st = os.stat(name)
            stats.append((absolute(name), st.st_size, st.st_mtime_ns))
    named = dataclasses.replace(
        task,
        path=absolute(task.path),
        sequences=tuple(map(absolute, task.sequences)),
        routing=absolute(task.routing) if task.routing else "",
    )
    return describe((named, stats))


@functools.cache
def source_digest() -> bytes:
    """sha256 of every module of the package (path and bytes, in path order) and of the
    versions of Python and of the libraries that compute: computed once, on the first read, so
    that another version of the code never reads states it did not make."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(describe(_versions()).encode())
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.digest()


def _versions() -> tuple[str, ...]:
    """Python's and the computing libraries' versions (numba's from its metadata: importing
    it costs more than a small read)."""
    try:
        numba = metadata.version("numba")
    except metadata.PackageNotFoundError:
        numba = ""
    return (sys.version, np.__version__, pa.__version__, numba)


def describe(value: Any, depth: int = 0) -> str:
    """A text naming ``value`` that is the same in every process (no hash order, no ids):
    scalars by their repr, containers in order (sets and dicts sorted), arrays by dtype, shape
    and a digest of their bytes, an object by its class and its ``cache_key()`` when it defines
    one, else its fields (a dataclass's, or its ``__dict__`` sorted). Raises ``Unstable``."""
    if depth > _MAX_DEPTH:
        raise Unstable("nested too deep")
    d = depth + 1
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, np.ndarray):
        return _array(value)
    if isinstance(value, np.generic):
        return f"np.{value.dtype.str}:{value.item()!r}"
    if isinstance(value, PurePath):
        return f"path:{str(value)!r}"
    if isinstance(value, tuple | list):
        return f"{type(value).__name__}(" + ",".join(describe(v, d) for v in value) + ")"
    if isinstance(value, set | frozenset):
        return "set(" + ",".join(sorted(describe(v, d) for v in value)) + ")"
    if isinstance(value, dict):
        items = sorted(f"{describe(k, d)}:{describe(v, d)}" for k, v in value.items())
        return "dict(" + ",".join(items) + ")"
    return _object(value, d)


def _array(value: np.ndarray) -> str:
    if value.dtype.hasobject:
        raise Unstable("an array of objects")
    digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
    return f"array:{value.dtype.str}:{value.shape}:{digest}"


def _object(value: Any, depth: int) -> str:
    cls = type(value)
    name = f"{cls.__module__}.{cls.__qualname__}"
    if isinstance(value, enum.Enum):
        return f"{name}.{value.name}"
    if isinstance(value, _CODE):  # its behaviour is not in its fields
        raise Unstable(f"{name} is code")
    own = getattr(value, "cache_key", None)
    if callable(own):
        return f"{name}[{describe(own(), depth)}]"
    if dataclasses.is_dataclass(value):
        fields = dataclasses.fields(value)
        parts = [f"{f.name}={describe(getattr(value, f.name), depth)}" for f in fields]
        return f"{name}(" + ",".join(parts) + ")"
    own_fields = getattr(value, "__dict__", None)
    if not isinstance(own_fields, dict) or callable(value):
        raise Unstable(f"{name} has no fields to describe it")
    parts = [f"{k}={describe(v, depth)}" for k, v in sorted(own_fields.items())]
    return f"{name}(" + ",".join(parts) + ")"


_CODE = (
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.ModuleType,
    functools.partial,
)


def kept(name: str | None) -> bool:
    """Whether an entry of ``name`` is there, written by this user (a stat, nothing read: it
    may still turn out damaged or not fit, and is then computed after all)."""
    where = directory()
    if name is None or where is None:
        return False
    try:
        return (where / f"{name}{SUFFIX}").stat().st_uid == os.getuid()
    except OSError:
        return False


def load(name: str | None) -> Any | None:
    """The value kept under ``name``, or None (no entry, the cache off, or an entry that does
    not read back whole: removed, to be computed again). A hit marks the entry as used."""
    where = directory()
    if name is None or where is None:
        return None
    path = where / f"{name}{SUFFIX}"
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_uid != os.getuid():  # not written by this user's process
                return None
            data = f.read()
    except OSError:
        return None
    try:
        value = _decode(name, data)
    except Exception:  # (a damaged pickle can raise anything: recompute)
        discard(name)
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # the eviction removes the least recently used first
    return value


def save(name: str | None, value: Any) -> None:
    """Keep ``value`` under ``name``: written to a temporary file, then renamed over the entry
    (a reader sees the whole entry or none; two writers of one key write the same bytes)."""
    where = directory()
    if name is None or where is None:
        return
    try:
        data = _encode(name, value)
    except Exception:  # (a state that does not pickle is not kept: recomputed)
        return
    tmp = where / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        where.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, where / f"{name}{SUFFIX}")
    except OSError:  # read-only home, a file in the way, a full disk: off for this process
        _off.add(str(where))
        with contextlib.suppress(OSError):
            tmp.unlink()
        return
    with _lock:
        _written[0] += 1


def discard(name: str) -> None:
    """Remove the entry ``name`` (one that did not read back, or of the wrong shape)."""
    where = directory()
    if where is not None:
        with contextlib.suppress(OSError):
            (where / f"{name}{SUFFIX}").unlink()


def _encode(name: str, value: Any) -> bytes:
    raw = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    packed = pa.Codec("zstd").compress(raw, asbytes=True)
    return MAGIC + name.encode() + b"\n" + _HEAD.pack(len(raw), zlib.crc32(packed)) + packed


def _decode(name: str, data: bytes) -> Any:
    head = MAGIC + name.encode() + b"\n"
    if not data.startswith(head) or len(data) < len(head) + _HEAD.size:
        raise ValueError("not an entry of this key")
    size, crc = _HEAD.unpack_from(data, len(head))
    body = memoryview(data)[len(head) + _HEAD.size :]
    if zlib.crc32(body) != crc:
        raise ValueError("damaged or truncated")
    raw = pa.Codec("zstd").decompress(body, decompressed_size=size, asbytes=True)
    if len(raw) != size:
        raise ValueError("not the size written")
    return pickle.loads(raw)


def evict_if_written() -> None:
    """After a read: evict to the cap when this process wrote entries since it last did (one
    scan of the directory per read that wrote, not one per entry)."""
    with _lock:
        written, _written[0] = _written[0], 0
    if written:
        evict()


def evict(cap: int | None = None) -> None:
    """Remove the least recently used entries until the directory holds at most ``cap`` bytes
    (``$MISMATCHCTL_CACHE_MB``), and temporary files left by processes that died."""
    with contextlib.suppress(UsageError):
        where = directory()
        cap = cap_bytes() if cap is None else cap
        if where is not None:
            _evict(where, cap)


def _evict(where: Path, cap: int) -> None:
    entries = []
    now = time.time()
    with contextlib.suppress(OSError), os.scandir(where) as found:
        for entry in found:
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                if entry.name.endswith(".tmp") and now - st.st_mtime > STALE_TEMP_SECONDS:
                    os.unlink(entry.path)
                elif entry.name.endswith(SUFFIX) and entry.is_file(follow_symlinks=False):
                    entries.append((st.st_mtime_ns, entry.name, st.st_size, entry.path))
    total = sum(e[2] for e in entries)
    for _, _, size, path in sorted(entries):
        if total <= cap:
            break
        with contextlib.suppress(OSError):
            os.unlink(path)
            total -= size
