"""A pickle reader that calls nothing the file names, except an allowlist of data rebuilders.

Unpickling calls whatever classes and functions the file names, which is how a pickle runs code.
:class:`RestrictedUnpickler` resolves a name only from its allowlist: numpy's array, scalar and
dtype rebuilders, a few builtin containers and ``OrderedDict``, and the stand-ins a reader
passes (classes that only collect the fields they are given). The rebuilders that allocate
refuse to build more than the pickle's own size (:class:`TooLarge`): a file of a few hundred
bytes cannot make them take gigabytes. Every other name becomes an *inert placeholder*: an
object that accepts any arguments and state and does nothing with them. No function named by the file
is called unless it is on the allowlist, so the file's own code never runs; the names that were
replaced are kept, for the record.

:func:`first_global` tells what a pickle holds without unpickling it: the first class or
function it names, read from the opcodes.
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from mismatchctl.ingest.py_values import brief

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

_BUILTINS: dict[str, Any] = {f"builtins.{t.__name__}": t for t in (complex, slice)}
_BUILTINS["collections.OrderedDict"] = OrderedDict
MAX_RANGE = 1 << 16  # the longest range a pickle may build (none of the dumps holds one)

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


class TooLarge(pickle.UnpicklingError):
    """A rebuilder of the allowlist was asked for more than the pickle can hold."""


def _sized(value: Any) -> bool:
    """Whether ``value`` is a collection the pickle itself spelled out (its size is bounded by
    the pickle's), not a lazy sequence such as a range or an int standing for a size."""
    return isinstance(value, bytes | bytearray | memoryview | str | list | tuple | set | frozenset)


def _guarded(budget: int) -> dict[str, Any]:
    """The allowlist's rebuilders that allocate, each refusing to build more than ``budget``
    bytes (the pickle's size): ``bytearray(8 << 30)``, ``set(range(10**9))`` or
    ``numpy.ndarray((10**9,), object)`` from a pickle of a few hundred bytes are refused, not
    allocated. What numpy and pickle write themselves (a bytearray from its bytes, a set from
    its items, an array rebuilt with shape (0,) and then given its data) passes."""

    def refuse(what: str) -> TooLarge:
        return TooLarge(f"{what}: more than the {budget:,} bytes of the pickle could hold")

    def from_items(kind: type) -> Any:
        def build(*args: Any) -> Any:
            if len(args) > 2 or (args and not _sized(args[0])):
                raise refuse(f"builtins.{kind.__name__}({brief(args[0]) if args else ''})")
            return kind(*args)

        return build

    def range_(*args: Any) -> range:
        value = range(*args)
        if len(value) > MAX_RANGE:
            raise refuse(f"builtins.range of {len(value):,} numbers")
        return value

    def checked_shape(shape: Any, dtype: Any, what: str) -> None:
        dims = shape if isinstance(shape, tuple | list) else (shape,)
        if not all(isinstance(d, int) for d in dims):
            return  # numpy refuses it itself
        count = int(np.prod([max(d, 0) for d in dims], dtype=object))
        if count * max(np.dtype(dtype).itemsize, 1) > budget:
            raise refuse(f"{what} of shape {list(dims)} ({count:,} elements)")

    def ndarray(shape: Any, dtype: Any = float, *args: Any, **kwargs: Any) -> np.ndarray:
        checked_shape(shape, dtype, "numpy.ndarray")
        return np.ndarray(shape, dtype, *args, **kwargs)

    def reconstruct(cls: Any, shape: Any, dtype: Any) -> np.ndarray:
        checked_shape(shape, np.uint8, "numpy's _reconstruct")
        return _reconstruct(np.ndarray if cls is ndarray else cls, shape, dtype)

    out: dict[str, Any] = {
        "builtins.bytearray": from_items(bytearray),
        "builtins.set": from_items(set),
        "builtins.frozenset": from_items(frozenset),
        "builtins.range": range_,
        "numpy.ndarray": ndarray,
    }
    for core in ("numpy.core", "numpy._core"):
        out[f"{core}.multiarray._reconstruct"] = reconstruct
    return out


def _stream_size(file: Any) -> int | None:
    try:
        return os.fstat(file.fileno()).st_size
    except (AttributeError, OSError, io.UnsupportedOperation):
        pass
    try:
        return len(file.getbuffer())
    except (AttributeError, TypeError):
        return None


class RestrictedUnpickler(pickle.Unpickler):
    """Resolves names from ``stand_ins`` (full name -> object), then the numpy and builtin
    allowlist; anything else becomes an :class:`Inert` subclass, recorded in ``replaced``.
    ``budget``: the most bytes a rebuilder may allocate (default: the size of ``file``)."""

    def __init__(self, file: Any, stand_ins: Mapping[str, Any], budget: int | None = None) -> None:
        super().__init__(file)
        budget = budget if budget is not None else _stream_size(file)
        guarded = _guarded(budget if budget is not None else 1 << 30)
        self.allowed = {**_NUMPY, **_BUILTINS, **guarded, **stand_ins}
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
