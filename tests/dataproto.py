"""Write verl ``DataProto.save_to_disk`` files without verl, for tests that need many variants.

The bytes are those of ``pickle.dump(data_proto, f)`` (protocol 4) with
``VERL_DATAPROTO_SERIALIZATION_METHOD=numpy``: ``verl.protocol.DataProto`` rebuilt by
``NEWOBJ`` and ``BUILD`` with the state ``((batch_size, device, {key: (dtype, torch.Size,
uint8 array)}), non_tensor_batch, meta_info)`` (verl/protocol.py ``serialize_tensordict``).
``test_readers_frameworks`` checks them against a file written by verl itself.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np


class DataProto:
    """Pickled under verl's name (``verl.protocol.DataProto``) by :class:`_Pickler`."""

    def __init__(self, state: tuple) -> None:
        self.state = state

    def __reduce_ex__(self, protocol: int) -> tuple:
        import copyreg

        return (copyreg.__newobj__, (DataProto,), self.state)


class _Pickler(pickle._Pickler):  # the Python pickler: its save_global can be overridden
    def save_global(self, obj: Any, name: str | None = None) -> None:
        if obj is DataProto:
            self.save("verl.protocol")
            self.save("DataProto")
            self.write(pickle.STACK_GLOBAL)
            self.memoize(obj)
            return
        super().save_global(obj, name)


def serialize(tensors: dict[str, Any]) -> tuple:
    """verl's ``serialize_tensordict`` of a batch of these tensors (torch or numpy)."""
    import torch

    items = {}
    rows = None
    for key, value in tensors.items():
        t = torch.as_tensor(value)
        rows = t.shape[0]
        data = t.flatten().contiguous().view(torch.uint8).numpy()
        items[key] = (str(t.dtype).removeprefix("torch."), t.shape, data)
    return ((rows,), None, items)


def dataproto_bytes(batch: Any, non_tensor: dict | None = None, meta: dict | None = None) -> bytes:
    """``batch``: a dict of tensors (serialized as verl does), or any object to pickle as is."""
    state = (
        serialize(batch) if isinstance(batch, dict) else batch,
        non_tensor if non_tensor is not None else {},
        meta if meta is not None else {},
    )
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=4).dump(DataProto(state))
    return buffer.getvalue()


def write_dataproto(path: Path, batch: Any, non_tensor: dict | None = None, **meta: Any) -> Path:
    path.write_bytes(dataproto_bytes(batch, non_tensor, meta))
    return path


def uids(n: int) -> np.ndarray:
    return np.array([f"u{i}" for i in range(n)], dtype=object)
