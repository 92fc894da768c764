"""What ``Monitor.update`` is given, as padded arrays on their own device: torch tensors stay
tensors (on their device), numpy arrays stay numpy. Ragged rows (a list of 1-D rows, as slime
keeps them) are padded on their device, with each row's length kept so that the rows stored are
those the list gives.

The step's per-token inputs are kept (a copy on their device, so the caller may reuse its
tensors) until the step is written; the one copy to the host is then the dump writer's
(``mismatchctl.dump``), at ``flush``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mismatchctl.dump import arrays as ar
from mismatchctl.errors import UsageError
from mismatchctl.monitor.device import torch_module
from mismatchctl.schema import LOGPROB_MAX


@dataclass
class Padded:
    """One ``update`` call: per-token inputs padded to ``[rows, width]`` (``values``: name ->
    array or tensor, the logprobs and mask always there), the model tokens (``keep``), and the
    row lengths when the input was ragged (or ``lengths`` was given)."""

    values: dict[str, Any]
    keep: Any
    rows: int
    lengths: Any = None
    tensor: bool = False
    per_row: dict[str, Any] = field(default_factory=dict)


NAMES = ("rollout_logprobs", "trainer_logprobs", "mask", "token_ids", "entropy")


def padded(given: dict[str, Any], lengths: Any) -> Padded:
    """The per-token inputs (``given``: the names of ``NAMES`` -> value or None) padded, each a
    copy on its device, with the model-token mask ``keep``."""
    mask = given["mask"]
    tensor = ar.is_tensor(mask) or (
        isinstance(mask, Sequence) and len(mask) > 0 and ar.is_tensor(mask[0])
    )
    if ar.is_padded(mask):
        values = {k: _copy(v, k, tensor) for k, v in given.items() if v is not None}
        _same_shapes(values)
    else:
        if lengths is not None:
            raise UsageError(
                "lengths is only for padded inputs (a 2-D mask); the mask given is ragged",
                "leave lengths out: ragged rows are written with their own lengths.",
            )
        values, lengths = _pad_rows(given, tensor)
    mask2 = values["mask"]
    rows = int(mask2.shape[0])
    keep = _model_tokens(mask2, tensor)
    if lengths is not None:
        lengths = _lengths(lengths, rows, int(mask2.shape[1]), mask2, tensor)
        keep = keep & (_arange(mask2, tensor)[None, :] < lengths[:, None])
    return Padded(values, keep, rows, lengths, tensor)


def _copy(value: Any, name: str, tensor: bool) -> Any:
    if tensor != ar.is_tensor(value):
        raise UsageError(
            f"{name}: a {type(value).__name__}, while the mask is "
            f"{'a torch tensor' if tensor else 'not a torch tensor'}",
            "pass every per-token input of one call as torch tensors, or every one as numpy.",
        )
    if tensor:
        return value.detach().clone()
    if not ar.is_padded(value):
        raise UsageError(
            f"{name}: expected a padded 2-D array like the mask, found {type(value).__name__}",
            "pass every per-token input with the mask's shape.",
        )
    return np.array(value, copy=True)


def _same_shapes(values: dict[str, Any]) -> None:
    shape = tuple(values["mask"].shape)
    for name, value in values.items():
        if tuple(value.shape) != shape:
            raise UsageError(
                f"{name}: shape {tuple(value.shape)}, expected the mask's {shape}",
                "pass every per-token input with the mask's shape.",
            )


def _pad_rows(given: dict[str, Any], tensor: bool) -> tuple[dict[str, Any], Any]:
    """Ragged rows padded with zeros (the mask with 0), and the rows' lengths."""
    mask_rows = ar.rows_of(given["mask"], "mask") if not tensor else _tensor_rows(given["mask"])
    lengths = np.array([len(r) for r in mask_rows], dtype=np.int64)
    out = {}
    for name, value in given.items():
        if value is None:
            continue
        rows = _tensor_rows(value, name) if tensor else ar.rows_of(value, name)
        if len(rows) != len(lengths) or any(
            len(a) != n for a, n in zip(rows, lengths, strict=False)
        ):
            raise UsageError(
                f"{name}: rows of other lengths than the mask's ({len(rows)} rows)",
                "every per-token input needs the mask's length in every row.",
            )
        out[name] = _stack(rows, tensor)
    return out, lengths


def _tensor_rows(value: Any, name: str = "mask") -> list[Any]:
    if not isinstance(value, Sequence) or not all(ar.is_tensor(v) and v.dim() == 1 for v in value):
        raise UsageError(
            f"{name}: expected a 2-D tensor or a list of 1-D tensors, like the mask",
            "pass every per-token input of one call in the mask's form.",
        )
    return list(value)


def _stack(rows: list[Any], tensor: bool) -> Any:
    width = max((len(r) for r in rows), default=0)
    if tensor:
        torch = torch_module()
        out = torch.zeros((len(rows), width), dtype=rows[0].dtype, device=rows[0].device)
        for i, row in enumerate(rows):
            out[i, : len(row)] = row.detach()
        return out
    dtype = np.result_type(*rows) if rows else np.float64
    out_np = np.zeros((len(rows), width), dtype=dtype)
    for i, row in enumerate(rows):
        out_np[i, : len(row)] = row
    return out_np


def _model_tokens(mask: Any, tensor: bool) -> Any:
    """The model tokens (mask == 1); a mask value other than 0 or 1 is an error."""
    if not tensor or mask.device.type == "cpu":  # numpy on the host: faster than torch's ops
        keep = ar.mask01(ar.to_numpy(mask), "mask")
        return torch_module().from_numpy(keep) if tensor else keep
    if bool(((mask != 0) & (mask != 1)).any().item()):
        ar.mask01(ar.to_numpy(mask), "mask")  # raises the dump writer's error, naming the value
    return mask == 1


def _arange(mask: Any, tensor: bool) -> Any:
    if tensor:
        return torch_module().arange(mask.shape[1], device=mask.device)
    return np.arange(mask.shape[1])


def _lengths(lengths: Any, rows: int, width: int, mask: Any, tensor: bool) -> Any:
    arr = ar.per_row_ints(lengths, "lengths", rows)
    if ((arr < 0) | (arr > width)).any():
        i = int(np.flatnonzero((arr < 0) | (arr > width))[0])
        raise UsageError(
            f"lengths: row {i} is {int(arr[i])} (expected 0 to the row width, {width})",
            "give each row's number of valid positions (the rest is padding).",
        )
    if tensor:
        return torch_module().as_tensor(arr, device=mask.device)
    return arr


def check_values(batch: Padded, step: int) -> None:
    """Logprobs at model tokens finite and <= LOGPROB_MAX (as ingest requires), checked where
    they are (one value copied back from a device); the first bad one is named."""
    keep = batch.keep
    on_device = batch.tensor and keep.device.type != "cpu"
    for name in ("rollout_logprobs", "trainer_logprobs"):
        values = batch.values[name]
        if on_device:
            bad = keep & ~(values.isfinite() & (values <= LOGPROB_MAX))
            if not bool(bad.any().item()):
                continue
            where = bad.nonzero()[0].tolist()
        else:
            host, mask = ar.to_numpy(values), ar.to_numpy(keep)
            bad = mask & ~(np.isfinite(host) & (host <= LOGPROB_MAX))
            if not bad.any():
                continue
            where = np.argwhere(bad)[0].tolist()
        found = values[where[0], where[1]].item()
        raise UsageError(
            f"update(step {step}): {name} is {found!r} at row {where[0]}, position {where[1]}, "
            f"a model token (expected finite logprobs <= {LOGPROB_MAX:g})",
            "pass the logprobs of the sampled tokens, and mask out (0) the positions without one.",
        )


def host_inputs(batch: Padded) -> dict[str, np.ndarray]:
    """The call's per-token inputs on the host (the one copy of the step's tokens)."""
    return {name: ar.to_numpy(value) for name, value in batch.values.items()}


def host_lengths(batch: Padded) -> np.ndarray | None:
    if batch.lengths is None:
        return None
    return ar.to_numpy(batch.lengths)
