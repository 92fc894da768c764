"""A pickle reader that calls nothing the file names, except an allowlist of data rebuilders.

Unpickling calls whatever classes and functions the file names, which is how a pickle runs code.
:class:`RestrictedUnpickler` resolves a name only from its allowlist: numpy's array, scalar and
dtype rebuilders, a few builtin containers and ``OrderedDict``, and the stand-ins a reader passes (classes that only
collect the fields they are given). Every other name becomes an *inert placeholder*: an object
that accepts any arguments and state and does nothing with them. No function named by the file
is called unless it is on the allowlist, so the file's own code never runs; the names that were
replaced are kept, for the record.

:func:`first_global` tells what a pickle holds without unpickling it: the first class or
function it names, read from the opcodes.
"""

from __future__ import annotations

import io
import pickle
import pickletools
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

try:  # numpy >= 2
    from numpy._core.multiarray import _reconstruct, scalar
    from numpy._core.numeric import _frombuffer
except ImportError:  # numpy 1.x
    from numpy.core.multiarray import _reconstruct, scalar  # type: ignore[no-redef]
    from numpy.core.numeric import _frombuffer  # type: ignore[no-redef]

# numpy writes these under ``numpy.core`` (1.x) or ``numpy._core`` (2.x); both name the same code
_NUMPY: dict[str, Any] = {
    "numpy.ndarray": np.ndarray,
    "numpy.dtype": np.dtype,
}
for _core in ("numpy.core", "numpy._core"):
    _NUMPY[f"{_core}.multiarray._reconstruct"] = _reconstruct
    _NUMPY[f"{_core}.multiarray.scalar"] = scalar
    _NUMPY[f"{_core}.numeric._frombuffer"] = _frombuffer

_BUILTINS: dict[str, Any] = {
    f"builtins.{t.__name__}": t for t in (set, frozenset, bytearray, complex, slice, range)
}
_BUILTINS["collections.OrderedDict"] = OrderedDict

# how far into a file the first global is looked for (a pickle names its class in its first bytes)
_SNIFF_BYTES = 1 << 16
_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING"}
_STRING_OPS |= {"SHORT_BINSTRING", "BINSTRING"}


class Inert:
    """What a name outside the allowlist becomes: built with any arguments, it keeps nothing."""

    name: ClassVar[str] = "?"

    def __new__(cls, *args: Any, **kwargs: Any) -> Inert:
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass

    def __repr__(self) -> str:
        return f"<not loaded: {self.name}>"


class RestrictedUnpickler(pickle.Unpickler):
    """Resolves names from ``stand_ins`` (full name -> object), then the numpy and builtin
    allowlist; anything else becomes an :class:`Inert` subclass, recorded in ``replaced``."""

    def __init__(self, file: Any, stand_ins: Mapping[str, Any]) -> None:
        super().__init__(file)
        self.allowed = {**_NUMPY, **_BUILTINS, **stand_ins}
        self.replaced: set[str] = set()

    def find_class(self, module: str, name: str) -> Any:
        full = f"{module}.{name}"
        if full in self.allowed:
            return self.allowed[full]
        self.replaced.add(full)
        return type(f"Inert[{full}]", (Inert,), {"name": full})

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent ids are not supported")


def restricted_load(data: bytes | Any, stand_ins: Mapping[str, Any]) -> tuple[Any, set[str]]:
    """(the unpickled object, the names replaced by placeholders); ``data`` is bytes or a binary
    file object."""
    stream = io.BytesIO(data) if isinstance(data, bytes | bytearray) else data
    unpickler = RestrictedUnpickler(stream, stand_ins)
    return unpickler.load(), unpickler.replaced


def first_global(path: Path) -> str | None:
    """The first class or function a raw pickle names (``verl.protocol.DataProto``), read from
    its opcodes without unpickling; None when the file is no raw pickle (a torch zip archive
    starts ``PK``) or names no global near its start."""
    with path.open("rb") as fh:
        head = fh.read(_SNIFF_BYTES)
    if not head.startswith(b"\x80"):
        return None
    return _first_global(head)


def _first_global(head: bytes) -> str | None:
    strings: list[str] = []  # strings pushed so far (STACK_GLOBAL takes the last two)
    memo: dict[int, str | None] = {}
    top: str | None = None  # the string on top of the stack, if the last push was one
    try:
        for op, arg, _ in pickletools.genops(io.BytesIO(head)):
            name = op.name
            if name in ("GLOBAL", "INST"):
                return str(arg).replace(" ", ".", 1)
            if name == "STACK_GLOBAL":
                return f"{strings[-2]}.{strings[-1]}" if len(strings) >= 2 else None
            if name in ("MEMOIZE", "BINPUT", "LONG_BINPUT"):
                memo[len(memo) if name == "MEMOIZE" else arg] = top
                continue
            top = str(arg) if name in _STRING_OPS else None
            if name in ("BINGET", "LONG_BINGET"):
                top = memo.get(arg)
            if top is not None:
                strings.append(top)
    except (ValueError, EOFError, KeyError, IndexError):  # cut off or not a pickle
        return None
    return None
