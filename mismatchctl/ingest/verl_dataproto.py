"""The content of a verl ``DataProto.save_to_disk`` file, read without verl or tensordict.

``save_to_disk`` is ``pickle.dump(data_proto, f)``; ``DataProto.__getstate__`` (verl/protocol.py)
makes the pickled state a tuple ``(batch, non_tensor_batch, meta_info)`` where

- ``batch`` is the bytes of ``torch.save(td)`` of the consolidated ``TensorDict`` (tensordict >=
  0.5 pickles it as ``_rebuild_tensordict_files_consolidated(metadata, storage)``: one uint8
  storage and, per key, ``(dtype, shape, start, stop, pad)``; without consolidation, as
  ``_make_td(TensorDict, state)``, and before 0.5 as a plain object, the tensors in
  ``state["_tensordict"]``), or, with
  ``VERL_DATAPROTO_SERIALIZATION_METHOD=numpy``, ``(batch_size, device, {key: (dtype, shape,
  uint8 array)})``; or None;
- ``non_tensor_batch`` is a dict of numpy arrays (``dtype=object`` for ``uid`` and the like);
- ``meta_info`` is a dict (``global_steps``, ``temperature``, ...).

The outer pickle is read by :class:`~mismatchctl.ingest.restricted_pickle.RestrictedUnpickler`
with a stand-in for ``DataProto``; the batch bytes by ``torch.load(weights_only=True)`` with
stand-ins for tensordict's rebuild functions. Neither calls code of verl, tensordict or the file.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mismatchctl.errors import InputError, MissingDependencyError
from mismatchctl.ingest.py_values import brief
from mismatchctl.ingest.restricted_pickle import TooLarge, restricted_load
from mismatchctl.ingest.torch_load import reason, refused_global, scan_globals

DATAPROTO = "verl.protocol.DataProto"
_TD = "tensordict._reductions"
_NESTED_PREFIXES = ("<NJT>", "<NJT_VALUES>", "<NJT_LENGTHS>", "<NJT_OFFSETS>")


class DataProtoState:
    """Stands for ``verl.protocol.DataProto``: keeps the state it is given, nothing else."""

    state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state


class TensorDictName:
    """Stands for ``tensordict._td.TensorDict``: named by ``_make_td``'s first argument, or
    rebuilt by plain pickling (tensordict < 0.5: the instance ``__dict__`` as state, the tensors
    in ``_tensordict``)."""

    leaves: Leaves | None = None

    def __setstate__(self, state: Any) -> None:
        self.leaves = _make_td(type(self), state)


@dataclass
class Leaves:
    """The tensors of a TensorDict by key (nested TensorDicts and jagged tensors listed apart)."""

    tensors: dict[str, Any] = field(default_factory=dict)
    nested: list[str] = field(default_factory=list)  # keys of sub-TensorDicts (not read)
    jagged: list[str] = field(default_factory=list)  # keys of nested jagged tensors


@dataclass
class DataProtoContent:
    batch: dict[str, Any]  # key -> torch tensor
    non_tensor: dict[str, Any]
    meta: dict[str, Any]
    replaced: set[str]  # names the file refers to that were not loaded (inert placeholders)
    nested: list[str] = field(default_factory=list)
    jagged: list[str] = field(default_factory=list)


def _dtype(torch: Any, name: Any) -> Any:
    value = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown tensor dtype {name!r}")
    return value


def _consolidated(metadata: Any, storage: Any) -> Leaves:
    """Stands for tensordict's ``_rebuild_tensordict_files_consolidated``: the same slicing of
    the one storage into tensors, without building a TensorDict."""
    import torch

    out = Leaves()
    for key, leaf in dict(metadata.get("leaves", {})).items():
        dtype, shape, start, stop, pad = leaf[:5]
        value = storage[start:stop].view(_dtype(torch, dtype))
        shape = torch.Size(shape)
        if pad:
            value = value[: shape.numel()]
        if str(key).startswith(_NESTED_PREFIXES):
            out.jagged.append(str(key))
        else:
            out.tensors[str(key)] = value.view(shape)
    reserved = {"leaves", "non_tensors", "cls", "cls_metadata", "size"}
    out.nested = [str(k) for k in metadata if k not in reserved]
    return out


def _make_td(cls: Any, state: Any) -> Leaves:
    """Stands for tensordict's ``_make_td``: the tensors of ``state["_tensordict"]``."""
    import torch

    out = Leaves()
    for key, value in dict(state.get("_tensordict", {})).items():
        if isinstance(value, torch.Tensor) and not value.is_nested:
            out.tensors[str(key)] = value
        else:
            out.nested.append(str(key))
    return out


def _torch(name: str) -> Any:
    try:
        import torch
    except ImportError as exc:
        raise MissingDependencyError(
            f"reading {name} (a verl DataProto pickle) needs torch, which is not installed",
            "pip install 'mismatchctl[torch]'",
        ) from exc
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 6):  # safe_globals with (object, name) pairs
        raise MissingDependencyError(
            f"reading {name} (a verl DataProto pickle) needs torch >= 2.6 (found "
            f"{torch.__version__})",
            "pip install -U 'mismatchctl[torch]'",
        )
    return torch


def load_dataproto(path: Path, name: str | None = None) -> DataProtoContent:
    """The batch tensors, non-tensor batch and meta info of a ``save_to_disk`` file; ``name``:
    the file as messages name it (default: its path)."""
    name = name or str(path)
    torch = _torch(name)
    stand_ins = {DATAPROTO: DataProtoState, "torch.Size": torch.Size}
    try:
        with path.open("rb") as fh:
            obj, replaced = restricted_load(fh, stand_ins)
    except TooLarge as exc:
        raise InputError(
            f"{name}: refused to build {exc} (a DataProto's values are spelled out in its "
            "file; nothing was allocated)",
            "a file that asks for this is not a batch verl saved: leave it out of the inputs.",
        ) from None
    except MemoryError:  # a counted opcode (BYTEARRAY8...) claiming more than there is
        raise InputError(
            f"{name}: refused: a value in the pickle claims more memory than this machine has "
            f"(the file is {path.stat().st_size:,} bytes)",
            "a file that asks for this is not a batch verl saved: leave it out of the inputs.",
        ) from None
    except FileNotFoundError:
        raise
    except Exception as exc:  # a corrupt pickle raises many types
        raise _corrupt(name, exc) from None
    state = obj.state if isinstance(obj, DataProtoState) else None
    if not (isinstance(state, tuple) and len(state) == 3):
        found = type(obj).__name__ if state is None else f"a state of {type(state).__name__}"
        raise InputError(
            f"{name}: the pickle holds {found}, expected a verl DataProto (whose state is "
            "(batch, non_tensor_batch, meta_info))",
            "pass --format to name the right format, or re-save the batch with "
            "DataProto.save_to_disk.",
        )
    batch, non_tensor, meta = state
    leaves = _batch(torch, batch, name)
    return DataProtoContent(
        batch=leaves.tensors,
        non_tensor=_named(non_tensor),
        meta=_named(meta),
        replaced=replaced,
        nested=leaves.nested,
        jagged=leaves.jagged,
    )


def _named(values: Any) -> dict[str, Any]:
    """A dict of the pickle with its keys as text (a key that is no text, in its brief repr:
    every message lists keys), values as they are; not a dict: empty."""
    if not isinstance(values, dict):
        return {}
    return {k if isinstance(k, str) else brief(k): v for k, v in values.items()}


def _batch(torch: Any, batch: Any, name: str) -> Leaves:
    if batch is None:
        return Leaves()
    if isinstance(batch, tuple) and len(batch) == 3:
        return _numpy_serialized(torch, batch, name)
    if not isinstance(batch, bytes | bytearray):
        raise InputError(
            f"{name}: the DataProto batch is a {type(batch).__name__}, expected the bytes of "
            "a saved TensorDict or verl's numpy serialization",
            "re-save the batch with DataProto.save_to_disk.",
        )
    names = [
        (_consolidated, f"{_TD}._rebuild_tensordict_files_consolidated"),
        (_make_td, f"{_TD}._make_td"),
        (TensorDictName, "tensordict._td.TensorDict"),
    ]
    data = bytes(batch)
    try:
        with torch.serialization.safe_globals(names):
            leaves = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise _batch_unreadable(name, exc, data, {n for _, n in names}) from None
    if isinstance(leaves, TensorDictName) and leaves.leaves is not None:
        return leaves.leaves
    if leaves is None or isinstance(leaves, Leaves):
        return leaves or Leaves()
    raise InputError(
        f"{name}: the DataProto batch holds a {type(leaves).__name__}, expected a TensorDict",
        "re-save the batch with DataProto.save_to_disk.",
    )


def _numpy_serialized(torch: Any, batch: tuple, name: str) -> Leaves:
    """verl's ``serialize_tensordict``: ``{key: (dtype, shape, uint8 array)}`` per tensor, or
    ``(layout, [...])`` for a nested tensor; decoded as ``deserialize_single_tensor`` does."""
    out = Leaves()
    _, _, items = batch
    for key, value in dict(items).items():
        if len(value) != 3:
            out.jagged.append(str(key))
            continue
        dtype, shape, data = value
        try:
            out.tensors[str(key)] = (
                _bytes(torch, data).view(_dtype(torch, dtype)).view(tuple(shape))
            )
        except (TypeError, ValueError, RuntimeError) as exc:
            raise InputError(
                f"{name}: batch key `{key}` cannot be decoded ({exc})",
                "the file is truncated or corrupt; re-export it, or leave it out of the inputs.",
            ) from None
    return out


def _bytes(torch: Any, data: Any) -> Any:
    """A tensor's bytes as a uint8 tensor: over the unpickled array itself when it is one
    (numpy unpickles it over the bytes read, writable: no copy; a batch's routes are hundreds of
    MB), else over a copy."""
    if (
        isinstance(data, np.ndarray)
        and data.dtype == np.uint8
        and data.ndim == 1
        and data.flags.c_contiguous
        and data.flags.writeable
    ):
        return torch.from_numpy(data)
    return torch.frombuffer(bytearray(memoryview(data)), dtype=torch.uint8)


def _first_line(exc: Exception) -> str:
    text = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    return text.replace("\x1b", "")


def _corrupt(name: str, exc: Exception) -> InputError:
    return InputError(
        f"cannot read {name} as a verl DataProto pickle: {_first_line(exc)}",
        "the file is truncated or corrupt; re-export it, or leave it out of the inputs.",
    )


def _batch_unreadable(name: str, exc: Exception, data: bytes, ours: set[str]) -> InputError:
    """Why torch did not load the batch bytes: a global outside what the restricted reader
    loads is a refusal naming it (nothing of it ran), only a stream that does not parse is
    damage."""
    named = refused_global(str(exc))
    found, parsed = scan_globals(data)
    names = [n for n in dict.fromkeys([named, *found] if named else found) if n not in ours]
    if names:
        listed = ", ".join(f"`{n}`" for n in names[:5])
        return InputError(
            f"{name}: the DataProto batch refers to {listed}, which the restricted reader does "
            "not load (it reads tensors and tensordict's own layout only); refused, and nothing "
            "from it ran",
            "re-save the batch with plain tensors in DataProto.batch (non-tensor values belong "
            "in non_tensor_batch), or export it to Parquet.",
        )
    if parsed and zipfile.is_zipfile(io.BytesIO(data)):
        return InputError(
            f"cannot read the batch of {name} (a TensorDict saved by torch): {reason(exc)} (its "
            "pickle reads: a tensor's data in it is damaged)",
            "the file is truncated or corrupt; re-export it, or leave it out of the inputs.",
        )
    return InputError(
        f"cannot read the batch of {name} (a TensorDict saved by torch): {reason(exc)}",
        "the file is truncated or corrupt; re-export it, or leave it out of the inputs.",
    )
