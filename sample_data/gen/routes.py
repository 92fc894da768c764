"""Routed experts as the Parquet dumps carry them (docs/frameworks.md, "Routed experts"): per
response, both sides' expert ids per input position and MoE layer, in one of three encodings.

Every encoding covers the dump's padded sequence (prompt + the step's padded response width);
positions without a recorded route hold -1 rows: the engine's last token (never an input) and
the padding.

- ``lists`` (verl's layout): a list per response of ``[layers][top_k]`` int16 lists, one per
  position of prompt + response (``ndarray.tolist()`` of a ``(positions, layers, top_k)`` array);
- ``sglang``: base64 of int32 ``[rows, layers, top_k]`` for the positions ``[start, seqlen - 1)``
  with ``start`` in a ``routed_experts_start_len`` column (here the last prompt position);
- ``prime``: a ``{data, shape, dtype}`` struct (prime-rl's ``RoutedExperts``): raw int8 bytes of
  the rows from position 0 (prompt + response - 1 rows; the trainer's: one per position).

The capture bug ``shift`` writes the trainer's rows one position late (a leading -1 row):
its dump is aligned per output position while the engine's is per input position. The capture
bug ``layers`` writes each of the trainer's layers in the next layer's slot (the last in the
first): a capture buffer indexed from 1.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from gen.rollout import Sample

ENCODINGS = ("lists", "sglang", "prime")
CAPTURE_BUGS = ("", "shift", "layers")
ROLLOUT, TRAINER = "rollout_routed_experts", "trainer_routed_experts"
START_LEN = "routed_experts_start_len"


def padded_rows(routes: np.ndarray | None, length: int) -> np.ndarray:
    """``routes`` from position 0, as int16 ``[length, layers, top_k]`` with -1 rows after them."""
    assert routes is not None and len(routes) <= length
    out = np.full((length, *routes.shape[1:]), -1, dtype=np.int16)
    out[: len(routes)] = routes
    return out


def shifted(rows: np.ndarray) -> np.ndarray:
    """The capture bug: row t written at t + 1 (the first row -1, the last dropped)."""
    out = np.full_like(rows, -1)
    out[1:] = rows[:-1]
    return out


def route_columns(
    samples: Sequence[Sample], width: int, encoding: str, capture_bug: str = ""
) -> dict[str, pa.Array]:
    """Both sides' routes of a step's responses, right-padded to the response ``width``."""
    assert encoding in ENCODINGS and capture_bug in CAPTURE_BUGS
    sides: dict[str, list[np.ndarray]] = {ROLLOUT: [], TRAINER: []}
    for s in samples:
        length = len(s.prompt) + width
        sides[ROLLOUT].append(padded_rows(s.rollout_routes, length))
        trainer = padded_rows(s.trainer_routes, length)
        if capture_bug == "shift":
            trainer = shifted(trainer)
        elif capture_bug == "layers":
            trainer = np.roll(trainer, 1, axis=1)
        sides[TRAINER].append(trainer)
    columns: dict[str, pa.Array] = {}
    if encoding == "sglang":
        starts = [len(s.prompt) - 1 for s in samples]
        for name, rows in sides.items():
            columns[name] = pa.array(
                [sglang_b64(r[start:-1]) for r, start in zip(rows, starts, strict=True)],
                pa.string(),
            )
        columns[START_LEN] = pa.array(starts, pa.int64())
    elif encoding == "prime":  # the engine's last position is never an input: one row fewer
        columns[ROLLOUT] = prime_struct([r[:-1] for r in sides[ROLLOUT]])
        columns[TRAINER] = prime_struct(sides[TRAINER])
    else:
        for name, rows in sides.items():
            columns[name] = nested_lists(rows)
    return columns


def nested_lists(arrays: Sequence[np.ndarray]) -> pa.ListArray:
    """list<list<list<int16>>>: per response, per position, per layer, the top-k ids."""
    layers, top_k = arrays[0].shape[1:]
    flat = np.concatenate([a.reshape(-1) for a in arrays])
    rows = np.array([len(a) for a in arrays], dtype=np.int64)
    n_rows = int(rows.sum())
    ids = pa.array(flat, pa.int16())
    by_layer = pa.ListArray.from_arrays(
        pa.array(np.arange(0, n_rows * layers * top_k + 1, top_k, dtype=np.int32)), ids
    )
    by_row = pa.ListArray.from_arrays(
        pa.array(np.arange(0, n_rows * layers + 1, layers, dtype=np.int32)), by_layer
    )
    offsets = np.concatenate([[0], np.cumsum(rows)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), by_row)


def sglang_b64(rows: np.ndarray) -> str:
    return base64.b64encode(rows.astype("<i4").tobytes()).decode("ascii")


def prime_struct(arrays: Sequence[np.ndarray]) -> pa.StructArray:
    data = pa.array([a.astype(np.int8).tobytes() for a in arrays], pa.binary())
    shape = pa.array([list(a.shape) for a in arrays], pa.list_(pa.int64()))
    dtype = pa.array(["int8"] * len(arrays), pa.string())
    return pa.StructArray.from_arrays([data, shape, dtype], ["data", "shape", "dtype"])
