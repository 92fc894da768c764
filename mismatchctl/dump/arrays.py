"""What ``DumpWriter.add`` accepts, turned into flat numpy values plus per-row lengths.

Per-token inputs come padded (a 2-D numpy array or torch tensor, one row per response, with the
mask telling model tokens from the rest) or ragged (a list of 1-D rows). Torch tensors are
detached and moved to the CPU; bf16 and fp16 become float32 (exactly); torch is never imported
here: a value can only be a tensor when the caller has imported torch already.

Everything returned is a copy: the caller may reuse or change its tensors after ``add``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mismatchctl.errors import UsageError


@dataclass
class Ragged:
    """Rows of one per-token input: row ``i`` is ``values[offsets[i]:offsets[i+1]]``."""

    values: np.ndarray
    lengths: np.ndarray  # int64, one per row


@dataclass
class Layout:
    """How the per-token inputs of one ``add`` call are cut into rows (decided by the mask)."""

    rows: int
    lengths: np.ndarray  # int64: values kept per row
    width: int | None = None  # padded inputs: the row width; None for ragged inputs
    keep: np.ndarray | None = None  # padded inputs: bool [rows, width], the positions kept


def is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def to_numpy(value: Any) -> np.ndarray:
    """A numpy array of a tensor, array or (nested) sequence of numbers; floats below 32 bits
    (bf16, fp16, fp8) widened to float32, which holds each of them exactly."""
    if is_tensor(value):
        t = value.detach().to("cpu")
        if t.is_floating_point() and t.element_size() < 4:
            t = t.float()
        return t.numpy()
    arr = np.asarray(value)
    if arr.dtype.kind == "f" and arr.dtype.itemsize < 4:
        return arr.astype(np.float32)
    return arr


def is_padded(value: Any) -> bool:
    """A 2-D array or tensor is padded rows; lists (and object arrays) are ragged rows."""
    if is_tensor(value):
        return value.dim() == 2
    return isinstance(value, np.ndarray) and value.ndim == 2 and value.dtype != object


def rows_of(value: Any, name: str) -> list[np.ndarray]:
    """The rows of a ragged input, each a 1-D numpy array."""
    if isinstance(value, (str, bytes)) or not (
        is_tensor(value) or isinstance(value, (np.ndarray, Sequence))
    ):
        raise UsageError(
            f"{name}: expected one row per response (a list of 1-D arrays, or a 2-D array), "
            f"found {type(value).__name__}",
            "pass a padded 2-D array or tensor, or a list with one array per response.",
        )
    array = (is_tensor(value) or isinstance(value, np.ndarray)) and value.dtype != object
    if array and value.ndim != 2:
        raise UsageError(
            f"{name}: a {value.ndim}-D array (expected one row per response: a 2-D array, or "
            "a list of 1-D rows)",
            "pass a padded 2-D array or tensor, or a list with one array per response.",
        )
    rows = [to_numpy(row) for row in value]
    for i, row in enumerate(rows):
        if row.ndim != 1:
            raise UsageError(
                f"{name}: row {i} has shape {row.shape} (expected a 1-D row of values)",
                "pass one flat array per response.",
            )
    return rows


def layout_of(mask: Any, lengths: Any) -> tuple[Layout, np.ndarray]:
    """The row layout decided by the mask, and the mask's kept values (bool)."""
    if is_padded(mask):
        arr = mask01(to_numpy(mask), "mask")
        rows, width = arr.shape
        kept = _padded_lengths(arr) if lengths is None else _given_lengths(lengths, rows, width)
        keep = np.arange(width)[None, :] < kept[:, None]
        return Layout(rows, kept, width, keep), arr[keep]
    if lengths is not None:
        raise UsageError(
            "lengths is only for padded inputs (a 2-D mask); the mask given is ragged",
            "leave lengths out: ragged rows are written with their own lengths.",
        )
    rows = rows_of(mask, "mask")
    kept = np.array([len(r) for r in rows], dtype=np.int64)
    flat = concat([mask01(r, f"mask row {i}") for i, r in enumerate(rows)], np.bool_)
    return Layout(len(rows), kept), flat


def _padded_lengths(mask: np.ndarray) -> np.ndarray:
    """Per row: up to and including its last model token (0 for a row without one)."""
    rows, width = mask.shape
    if width == 0:
        return np.zeros(rows, dtype=np.int64)
    last_from_end = np.argmax(mask[:, ::-1], axis=1)
    return np.where(mask.any(axis=1), width - last_from_end, 0).astype(np.int64)


def _given_lengths(lengths: Any, rows: int, width: int) -> np.ndarray:
    arr = per_row_ints(lengths, "lengths", rows)
    bad = np.flatnonzero((arr < 0) | (arr > width))
    if len(bad):
        i = int(bad[0])
        raise UsageError(
            f"lengths: row {i} is {int(arr[i])} (expected 0 to the row width, {width})",
            "give each row's number of valid positions (the rest is padding).",
        )
    return arr


def per_token(value: Any, name: str, layout: Layout) -> np.ndarray:
    """One per-token input cut into the layout's rows, as flat values."""
    if layout.width is not None:
        if not is_padded(value):
            raise UsageError(
                f"{name}: the mask is a padded 2-D array, {name} is not (found {_describe(value)})",
                f"pass {name} padded like the mask, shape ({layout.rows}, {layout.width}).",
            )
        arr = to_numpy(value)
        if arr.shape != (layout.rows, layout.width):
            raise UsageError(
                f"{name}: shape {arr.shape}, expected the mask's ({layout.rows}, {layout.width})",
                "pass every per-token input with the mask's shape.",
            )
        assert layout.keep is not None
        return arr[layout.keep]
    rows = rows_of(value, name)
    _same_rows(rows, name, layout)
    return concat(rows, np.float64)


def _same_rows(rows: list[np.ndarray], name: str, layout: Layout) -> None:
    if len(rows) != layout.rows:
        raise UsageError(
            f"{name}: {len(rows)} rows, expected the mask's {layout.rows}",
            "pass one row per response, in the mask's order.",
        )
    for i, row in enumerate(rows):
        if len(row) != layout.lengths[i]:
            raise UsageError(
                f"{name}: row {i} has {len(row)} values, the mask's row has {layout.lengths[i]}",
                "every per-token input needs the mask's length in every row.",
            )


def concat(rows: list[np.ndarray], dtype: Any) -> np.ndarray:
    """The rows end to end (empty rows, float64 when built from ``[]``, change no dtype)."""
    full = [r for r in rows if len(r)]
    if not full:
        return np.zeros(0, dtype=rows[0].dtype if rows else dtype)
    return np.concatenate(full)


def _describe(value: Any) -> str:
    if is_tensor(value) or isinstance(value, np.ndarray):
        return f"shape {tuple(value.shape)}"
    return type(value).__name__


def mask01(arr: np.ndarray, name: str) -> np.ndarray:
    """A 0/1 mask (bool, integers, or floats 0.0/1.0) as bool; anything else is an error."""
    if arr.dtype == np.bool_:
        return arr.copy()
    if arr.dtype.kind not in "iuf":
        raise UsageError(f"{name}: expected a 0/1 mask, found dtype {arr.dtype}", _MASK_HINT)
    wrong = (arr != 0) & (arr != 1)
    if wrong.any():
        at = np.argwhere(wrong)[0]
        raise UsageError(
            f"{name}: value {arr[tuple(at)].item()!r} at {tuple(int(i) for i in at)} "
            f"({int(wrong.sum())} values are neither 0 nor 1)",
            _MASK_HINT,
        )
    return arr == 1


_MASK_HINT = (
    "pass the response mask: 1 on model-generated tokens, 0 on prompt, tool-response and padding "
    "positions (attention_mask is not one: it is 1 on tool responses too)."
)


def floats(values: np.ndarray, name: str) -> np.ndarray:
    """Logprobs and entropies: floating point only (float32 and float64 kept as they are)."""
    if values.dtype.kind != "f":
        raise UsageError(
            f"{name}: expected floating point values, found dtype {values.dtype}",
            f"pass {name} as float32 or float64 (bf16 and fp16 tensors are widened exactly).",
        )
    return values


def token_ids(values: np.ndarray, name: str) -> np.ndarray:
    """Token ids: integers, int32 when every id fits (as vocabularies do), else int64."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int32)
    if values.dtype.kind not in "iu":
        raise UsageError(
            f"{name}: expected integer token ids, found dtype {values.dtype}",
            f"pass {name} as an integer array or tensor.",
        )
    low, high = int(values.min()), int(values.max())
    if high >= 2**63:
        raise UsageError(f"{name}: token id {high} beyond int64", "pass token ids below 2**63.")
    fits = low >= -(2**31) and high < 2**31
    return values.astype(np.int32 if fits else np.int64)


def per_row_ints(value: Any, name: str, rows: int) -> np.ndarray:
    """One integer per row (an int64 array of ``rows`` values)."""
    arr = to_numpy(value)
    if arr.ndim == 0:
        raise UsageError(
            f"{name}: expected one integer per response, found a single value",
            f"pass {name} as a list or 1-D array of {rows} integers.",
        )
    if arr.ndim != 1 or len(arr) != rows:
        raise UsageError(
            f"{name}: shape {arr.shape}, expected ({rows},): one integer per response",
            f"pass {name} as a list or 1-D array of {rows} integers.",
        )
    if arr.dtype.kind not in "iu" or (arr.dtype.kind == "u" and len(arr) and arr.max() >= 2**63):
        raise UsageError(
            f"{name}: expected integers, found dtype {arr.dtype}",
            f"pass {name} as integers.",
        )
    return arr.astype(np.int64)
