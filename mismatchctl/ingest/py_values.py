"""Turning Python values (from JSON lines or a torch ``.pt`` file) into numpy arrays, strictly.

Readers of Parquet get typed columns; readers of JSON and pickles get whatever the producer put
there. Nothing is coerced silently here: a string, a bool, a nested list, a fractional token id or
a 0.5 mask value is an error naming where it was found, never a truncated or guessed number.
"""

from __future__ import annotations

import reprlib
from typing import Any

import numpy as np

from mismatchctl.errors import InputError

_INT64_MAX = np.iinfo(np.int64).max
_NUMBER = (int, float)


_BRIEF = reprlib.Repr()  # a repr of bounded cost: a few levels and items of a nested value
_BRIEF.maxlevel, _BRIEF.maxlist, _BRIEF.maxtuple, _BRIEF.maxdict = 2, 4, 4, 3
_BRIEF.maxstring, _BRIEF.maxother, _BRIEF.maxlong = 60, 60, 40


def brief(value: Any) -> str:
    """A value from a file for a message: its repr cut short, at a cost that does not grow with
    the value (a list nested 100,000 deep, or one whose items share one list, is not walked)."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):  # an array or tensor: no elements
        return f"{type(value).__name__} of shape {list(value.shape)} and dtype {value.dtype}"
    if isinstance(value, int) and value.bit_length() > 128:  # no decimal text for it
        return f"an integer of {value.bit_length():,} bits"
    try:
        text = _BRIEF.repr(value)
    except ValueError:  # an integer inside beyond the digits Python converts to text
        text = f"a {type(value).__name__} holding a huge integer"
    return text if len(text) <= 80 else text[:77] + "..."


def _found(value: Any) -> str:
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return brief(value)
    return f"{type(value).__name__} {brief(value)}"


def _error(where: str, expected: str, found: str, hint: str) -> InputError:
    return InputError(f"{where}: expected {expected}, found {found}", hint)


def _tensor(value: Any) -> np.ndarray | None:
    """A torch tensor as a flat numpy array (float64 for floating dtypes, which bf16 needs)."""
    if not (hasattr(value, "detach") and hasattr(value, "is_floating_point")):
        return None
    t = value.detach().to("cpu")
    if t.is_complex():
        return np.zeros(0, dtype=complex)  # rejected by the dtype check of the caller
    if t.is_floating_point():
        t = t.double()
    return t.numpy().reshape(-1)


def _array(value: Any, where: str, expected: str, hint: str, bools: bool = False) -> np.ndarray:
    """A flat numeric numpy array from a list, tuple, numpy array or tensor; None -> NaN."""
    arr = _tensor(value)
    if arr is None and isinstance(value, np.ndarray):
        arr = value.reshape(-1) if value.dtype.kind in "biuf" else None
    if arr is not None:
        if arr.dtype.kind not in "biuf":
            raise _error(where, expected, f"an array of {arr.dtype}", hint)
        return arr
    if not isinstance(value, list | tuple):
        raise _error(where, expected, _found(value), hint)
    kinds = {type(v) for v in value}
    if bools and kinds == {bool}:
        return np.array(value, dtype=bool)
    if bools and bool in kinds:  # true/false mixed with numbers: name the first number
        i = next(i for i, v in enumerate(value) if type(v) is not bool)
        found = f"{_found(value[i])} at index {i}, among true/false values"
        raise _error(where, expected, found, hint)
    if not kinds <= {int, float, type(None)}:
        bad = next(v for v in value if type(v) not in (int, float, type(None)))
        raise _error(where, expected, f"{_found(bad)} at index {value.index(bad)}", hint)
    items = [np.nan if v is None else v for v in value] if type(None) in kinds else value
    try:
        arr = np.array(items, dtype=np.float64 if float in kinds or not items else None)
    except OverflowError:
        arr = np.zeros(0, dtype=object)
    if arr.dtype.kind == "O":  # Python ints beyond 64 bits
        raise _error(where, expected, "a number too large for 64 bits", hint)
    return arr


def floats(value: Any, where: str, hint: str) -> np.ndarray:
    """float64 values; None (JSON null) becomes NaN and is then judged like any non-finite value."""
    arr = _array(value, where, "a list of numbers", hint)
    if arr.dtype.kind == "b":
        raise _error(where, "a list of numbers", "booleans", hint)
    return arr.astype(np.float64)


def ints(value: Any, where: str, hint: str) -> np.ndarray:
    """int64 values: integral numbers only (1.5 is an error, not 1)."""
    expected = "a list of integers"
    arr = _array(value, where, expected, hint)
    if arr.dtype.kind == "b":
        raise _error(where, expected, "booleans", hint)
    if arr.dtype.kind in "iu" and arr.dtype != np.uint64:
        return arr.astype(np.int64)
    as_float = arr.astype(np.float64)
    bad = ~np.isfinite(as_float) | (as_float != np.round(as_float)) | (np.abs(as_float) > 2**62)
    if arr.dtype == np.uint64:
        bad = arr > _INT64_MAX
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise _error(where, expected, f"{arr[i].item()!r} at index {i}", hint)
    return arr.astype(np.int64)


def mask(value: Any, where: str, hint: str) -> np.ndarray:
    """A 0/1 (or true/false) mask as bool; 0.5, 2 or null are errors."""
    arr = _array(value, where, "a list of 0/1 values", hint, bools=True)
    if arr.dtype.kind == "b":
        return arr.astype(bool)
    bad = (arr != 0) & (arr != 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise _error(where, "a list of 0/1 values", f"{arr[i].item()!r} at index {i}", hint)
    return arr == 1


def scalar(value: Any, where: str, hint: str) -> float:
    """One optional number per sample (a reward): a number or a one-element list/tensor; None,
    and values that hold no single number (a dict of reward parts, a longer list), are unknown
    (NaN); text is an error."""
    if value is None or isinstance(value, dict):
        return float("nan")
    if isinstance(value, np.generic):  # a numpy number, as a full unpickling may give
        value = value.item()
    if isinstance(value, _NUMBER) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # an integer beyond float64
            raise _error(where, "a number", "an integer beyond float64", hint) from None
    arr = floats(value, where, hint)
    return float(arr[0]) if arr.size == 1 else float("nan")


def text(value: Any, where: str, hint: str) -> str:
    """A sample id as text: strings as they are, numbers and tensors as their integer or text."""
    if hasattr(value, "item"):  # a numpy value or a tensor: of one element only
        count = value.numel() if hasattr(value, "numel") else getattr(value, "size", 1)
        if count != 1:
            raise _error(where, "one value", f"{_found(value)} ({count} values)", hint)
        value = value.item()
    if isinstance(value, list | tuple | dict | set):
        raise _error(where, "text or a number", _found(value), hint)
    result = value if isinstance(value, str) else str(value)
    try:
        result.encode("utf-8")
    except UnicodeEncodeError:
        raise _error(where, "text that is valid unicode", f"{_found(value)}", hint) from None
    return result
