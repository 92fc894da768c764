"""Loading a torch ``.pt`` file without running code from it.

``torch.load(weights_only=True)`` rebuilds tensors, lists, dicts and numbers only. A file that
needs more is refused as unsafe, naming the global it refers to, unless the user passes
``--trust-pickle`` (full unpickling: it runs whatever the file says). Torch words that refusal in
several ways, and refuses a protocol 4-5 pickle at its first opcode, before it reads any global
(torch 2.13, ``torch/_weights_only_unpickler.py``):

- ``Unsupported global: GLOBAL <name> was not an allowed global by default...``
- ``Trying to load unsupported GLOBAL <name> whose module <module> is blocked.`` (``os``,
  ``posix``, ``subprocess``, ``sys``...: ``os.system`` pickles as ``posix.system``)
- ``Trying to call reduce for unrecognized function <func>``, ``Can only create new object for
  nn.Parameter or classes allowlisted via `add_safe_globals` but got <class>``, ``Can only
  build Tensor, Parameter, OrderedDict or types allowlisted via `add_safe_globals`, but got
  <type>``: an allowed global used in a way only full unpickling supports
- ``Unsupported operand <n>``: an opcode it does not know. That is a damaged file, or a pickle
  of protocol 4-5 (``FRAME``, ``STACK_GLOBAL``, ``MEMOIZE``) or 0-1 (``DICT``, ``LIST``...) that
  ``torch.save`` never writes; ``String is too long``, ``EOFError`` and the persistent-id errors
  are damage.

So the refusal names the global of torch's message when it gives one, and the globals torch does
not allow that the pickle itself refers to, read opcode by opcode (``pickletools.genops``, a
parser: nothing in the file runs). A pickle that parses and refers to none (a protocol torch's
loader does not read) is said to be one; only a stream that does not parse is reported as
truncated or corrupt.
"""

from __future__ import annotations

import io
import pickletools
import re
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mismatchctl.errors import InputError, MissingDependencyError

TRUST_FLAG = "--trust-pickle"
CORRUPT_HINT = "the file is truncated or corrupt; re-export it, or leave it out of the inputs."
# (pattern, group): the global (or class) a weights_only refusal names
_REFUSALS = (
    re.compile(r"GLOBAL (\S+) (?:was not an allowed global|whose module)"),
    re.compile(r"(?:but got|unrecognized function) <class '([^']+)'>"),
)
_STRINGS = {
    "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "STRING", "BINSTRING",
    "SHORT_BINSTRING",
}  # fmt: skip
_MAX_PICKLES = 8  # a legacy torch file is a few pickles in a row, then raw storage bytes
MAX_NAMED = 5  # globals named in a refusal


def load_pt(path: Path, trust_pickle: bool, label: str) -> Any:
    """The content of a ``.pt`` file: tensors, lists, dicts and numbers only, unless trusted.
    ``label`` names the file in messages."""
    try:
        import torch
    except ImportError as exc:
        raise MissingDependencyError(
            f"reading {label} (a torch .pt file) needs torch, which is not installed",
            "pip install 'mismatchctl[torch]'",
        ) from exc
    try:
        with warnings.catch_warnings():  # "Detected pickle protocol 5": judged below instead
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(path, map_location="cpu", weights_only=not trust_pickle)
    except FileNotFoundError:
        raise  # removed while it was read: the caller says so
    except Exception as exc:  # torch raises many types for corrupt or unsafe pickles
        if trust_pickle:
            raise _trusted_failure(path, label, exc) from None
        raise _judged(path, label, exc) from None


def _trusted_failure(path: Path, label: str, exc: Exception) -> InputError:
    """Why full unpickling failed. Torch unpickles a raw (non-zip) file's first pickle before it
    finds no magic number in it: whatever that pickle calls has run by then, and is said."""
    found, parsed = scan_globals(path)
    archive = zipfile.is_zipfile(path)
    why = "no torch magic number" if "magic number" in str(exc) else reason(exc)
    if found and not archive:
        return InputError(
            f"{label}: full unpickling ({TRUST_FLAG}) ran its pickle, which calls "
            f"{_listed(found)}, and torch then found it is no torch file ({why})",
            "the file is not one torch.save wrote, and the code it names has run with your "
            f"permissions: check what it did, and pass {TRUST_FLAG} only for files whose "
            "writer you know.",
        )
    if parsed and not archive:
        return InputError(
            f"cannot load {label} with full unpickling ({TRUST_FLAG}): {why} (it is a pickle "
            "that calls nothing torch does not allow, but not one torch.save wrote)",
            "re-save the dump with torch.save, or leave it out of the inputs.",
        )
    return _corrupt(label, f"with full unpickling ({TRUST_FLAG})", exc)


def _judged(path: Path, label: str, exc: Exception) -> InputError:
    """Why weights_only loading failed: unsafe (naming the globals), or a corrupt file."""
    named = refused_global(str(exc))
    found, parsed = scan_globals(path)
    names = list(dict.fromkeys([named, *found] if named else found))
    if names:
        return _refused(label, names)
    if parsed and zipfile.is_zipfile(path):  # its pickle reads: a storage of the archive fails
        return InputError(
            f"cannot load {label} as a torch file: {reason(exc)} (its pickle reads and refers "
            "to no unsafe global: a tensor's data in the archive is damaged)",
            CORRUPT_HINT,
        )
    if parsed:
        return InputError(
            f"cannot load {label} with weights_only=True: {reason(exc)} (it is a pickle that "
            "refers to no unsafe global, but not one written by torch.save)",
            f"re-save the dump with torch.save; or, if you trust the file and whoever wrote "
            f"it, pass {TRUST_FLAG} (full unpickling runs any code the file contains).",
        )
    return _corrupt(label, "with weights_only=True", exc)


def _corrupt(label: str, how: str, exc: Exception) -> InputError:
    return InputError(f"cannot load {label} as a torch file {how}: {reason(exc)}", CORRUPT_HINT)


def _listed(names: list[str]) -> str:
    """``a``, ``a` and `b``, ... at most MAX_NAMED of them, then how many more."""
    shown = [f"`{n}`" for n in names[:MAX_NAMED]]
    listed = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]
    return listed + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")


def _refused(label: str, names: list[str]) -> InputError:
    return InputError(
        f"{label} needs full unpickling to load (it refers to {_listed(names)}, which "
        "weights_only=True loading does not allow); refused, so that no code from a dump runs",
        f"if you trust the file and whoever wrote it, pass {TRUST_FLAG}: full unpickling runs "
        "any code the file contains, with your permissions. Otherwise re-save the dump with "
        "plain tensors, lists and numbers.",
    )


def reason(exc: Exception) -> str:
    """The line of torch's message that says what went wrong (its first lines are boilerplate
    about the weights_only default, its last a pointer to the documentation)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if lines[0].startswith("Weights only load failed"):
        inner = [x for x in lines[1:] if not x.startswith("Check the documentation")]
        if inner:
            return inner[-1].removeprefix("WeightsUnpickler error:").strip()[:300]
    return lines[0][:300]


def refused_global(message: str) -> str | None:
    """The global (or class) a weights_only refusal names, in any of torch's wordings."""
    for pattern in _REFUSALS:
        found = pattern.search(message)
        if found:
            return found.group(1).rstrip(".")
    return None


def scan_globals(path: Path | bytes) -> tuple[list[str], bool]:
    """(the globals of the file's pickle that torch does not allow, in order, whether at least
    one whole pickle parsed); ``path``: a file, or the bytes of one. Reads opcodes only:
    nothing in the file runs."""
    allowed = _allowed_globals()
    parsed, found = False, []
    try:
        for name in _globals(_pickle_stream(path)):
            if name is None:
                parsed = True
            elif not allowed(name) and name not in found:
                found.append(name)
    except (ValueError, EOFError, OSError, zipfile.BadZipFile, KeyError, IndexError):
        pass  # the stream stops parsing here: damage, or raw bytes after a legacy file's pickles
    return found, parsed or bool(found)


def _pickle_stream(path: Path | bytes) -> io.BytesIO:
    """The pickle of a torch file: ``*/data.pkl`` of a zip archive, else the file itself."""
    source = io.BytesIO(path) if isinstance(path, bytes) else path
    if zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as archive:
            name = next(n for n in archive.namelist() if n.endswith("data.pkl"))
            return io.BytesIO(archive.read(name))
    return io.BytesIO(path if isinstance(path, bytes) else path.read_bytes())


def _globals(stream: io.BytesIO) -> Iterator[str | None]:
    """Each global the pickles of ``stream`` refer to (``module.name``), and None at the end of
    each whole pickle. ``STACK_GLOBAL`` (protocol 4-5) takes the two strings pushed before it,
    directly or through the memo."""
    for _ in range(_MAX_PICKLES):
        if not stream.read(1):
            return
        stream.seek(-1, io.SEEK_CUR)
        strings: list[str] = []  # every string pushed, in order
        memo: dict[int, str | None] = {}
        last: str | None = None  # the string the last opcode pushed (None: something else)
        for op, arg, _pos in pickletools.genops(stream):
            name = op.name
            if name in ("GLOBAL", "INST"):
                yield str(arg).replace(" ", ".", 1)
            elif name == "STACK_GLOBAL" and len(strings) >= 2:
                yield f"{strings[-2]}.{strings[-1]}"
            elif name in _STRINGS:
                last = arg if isinstance(arg, str) else bytes(arg).decode("latin-1")
                strings.append(last)
                continue
            elif name == "MEMOIZE":
                memo[len(memo)] = last
                continue
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[arg] = last
                continue
            elif name in ("GET", "BINGET", "LONG_BINGET") and memo.get(arg) is not None:
                last = memo[arg]
                strings.append(last)  # type: ignore[arg-type]
                continue
            last = None
        yield None


def _allowed_globals():
    """Whether torch's weights_only loader allows a global (its own list is private API: when
    it moves, globals of torch, collections and builtins count as allowed)."""
    import torch

    try:
        from torch import _weights_only_unpickler as unpickler

        names = set(unpickler._get_allowed_globals())
    except (ImportError, AttributeError):
        return lambda name: name.split(".")[0] in ("torch", "collections", "builtins")
    for item in torch.serialization.get_safe_globals():
        obj, name = item if isinstance(item, tuple) else (item, None)
        names.add(name or f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}")
    return names.__contains__
