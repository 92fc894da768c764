"""Routed experts (MoE): the top-k expert ids of each position and layer, read from a column.

A column holds one side's routes (the inference engine's or the trainer's) in one of the
encodings in use, detected from its Arrow type:

- a list per sequence of ``[layers][top_k]`` lists (``ndarray.tolist()`` of a ``(tokens, layers,
  top_k)`` array): aligned with the response (as many rows as logprobs), or with the whole
  sequence (verl's ``routed_experts``, as long as the attention mask: trimmed by the prompt
  length, keeping the last prompt row);
- a string per sequence (SGLang's ``meta_info.routed_experts``): base64 of int32
  ``[num_tokens, num_layers, top_k]``, rows for the absolute positions ``[start, seqlen - 1)``
  with ``start`` from a ``routed_experts_start_len`` column (else 0); needs ``top_k``;
- a struct per sequence ``{data: bytes, shape: [rows, layers, top_k], dtype}`` (prime-rl's
  ``RoutedExperts``, uint8 by default), rows from absolute position 0;
- a padded ``[sequences, rows, layers, top_k]`` integer array (verl's ``DataProto`` batch key
  ``routed_experts``): its rows placed as a list column's.

Every encoding becomes :class:`SideRoutes`: integer rows ``[rows, layers, top_k]`` per sequence,
``-1`` where no route was recorded, with the response index of each sequence's first row
(``-1``: the last prompt position, the row that produced the first response token).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mismatchctl.columns import list_lengths, numpy_of, valid_of
from mismatchctl.errors import InputError
from mismatchctl.ingest import arrow_values as av
from mismatchctl.ingest import routes_base64
from mismatchctl.ingest.batch import offsets_from_lengths
from mismatchctl.ingest.routing_threads import over_ranges

START_LEN = "routed_experts_start_len"  # SGLang's request field, kept as a column
DTYPES = ("uint8", "int8", "int16", "uint16", "int32", "int64")
MAX_LAYERS = 64  # the agreement of a token's layers is one 64-bit mask


@dataclass
class SideRoutes:
    """One side's routes of ``n`` sequences: sequence ``i`` owns ``ids[offsets[i]:offsets[i+1]]``,
    its first row being response index ``first[i]`` (``-1``: the last prompt position)."""

    ids: np.ndarray  # [rows, layers, top_k] of the dump's integer type, -1 = not recorded
    offsets: np.ndarray  # int64 [n + 1]
    first: np.ndarray  # int64 [n]
    column: str  # the column, for messages
    # verl (a DataProto tensor, or a whole-sequence list) marks a position the engine did not
    # record (the last response token, the turns after the last generation, padding) by zeros
    zeros_unrecorded: bool = False
    kind: str = "column"  # what the reader calls ``column`` in messages: a batch key, a key

    @property
    def named(self) -> str:
        """The routes' source for messages: ``column `x```, ``batch key `x```."""
        return f"{self.kind} `{self.column}`"

    @property
    def layers(self) -> int:
        return int(self.ids.shape[1])

    @property
    def top_k(self) -> int:
        return int(self.ids.shape[2])

    def keep(self, keep: np.ndarray) -> SideRoutes:
        rows = np.diff(self.offsets)
        return SideRoutes(
            self.ids[np.repeat(keep, rows)],
            offsets_from_lengths(rows[keep]),
            self.first[keep],
            self.column,
            self.zeros_unrecorded,
            self.kind,
        )


@dataclass
class Layout:
    """What a reader knows of each sequence to place its rows: its number of logprobs, its
    prompt's length (``-1``: unknown) and, for a whole-sequence list, the prompt part's width."""

    lengths: np.ndarray  # int64 [n]
    prompts: np.ndarray  # int64 [n], -1 = unknown
    widths: np.ndarray | None = None  # int64 [n]: attention mask length minus the response
    names: list[str] | None = None  # each sequence for messages: sample `id` (row 17)

    def at(self, i: int) -> str:
        return self.names[i] if self.names else f"row {i}"


def read_side(
    column: pa.Array | pa.ChunkedArray | list[np.ndarray] | np.ndarray,
    name: str,
    label: str,
    layout: Layout,
    starts: np.ndarray | None,
    top_k: int,
) -> SideRoutes:
    """The routes in ``column`` (one value per sequence), in whichever encoding it holds."""
    if isinstance(column, np.ndarray):  # a padded batch tensor (verl's DataProto)
        return _dense(column, name, f"{label}: batch key `{name}`", layout)
    if isinstance(column, list):  # arrays per sequence (a .pt dump): rows from position 0
        side = _absolute_arrays(column, name, f"{label}: `{name}`", layout)
        side.kind = "key"
        return side
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    what = f"{label}: column `{name}`"
    t = column.type
    if av.is_list_type(t):
        return _nested(column, name, what, layout)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _sglang(column, name, what, layout, starts, top_k)
    if pa.types.is_struct(t):
        return _prime(column, name, what, layout)
    raise InputError(
        f"{what} is {t}, expected routed experts: a list of [layers][top_k] lists per sequence, "
        "a base64 string (SGLang) or a {data, shape, dtype} struct (prime-rl)",
        f"map the routes column with --map rollout_routes=<column>, or leave `{name}` unmapped.",
    )


def _nested(column: pa.Array, name: str, what: str, layout: Layout) -> SideRoutes:
    """``[rows][layers][top_k]`` lists; rows aligned with the response, or the whole sequence.

    Decoded from the Arrow buffers: each level's offsets (checked regular below the rows: every
    row has the same layers, every layer the same top-k; a fixed-size list is regular by its
    type) and the ids' buffer as one ``[rows, layers, top_k]`` array, without a copy unless
    they are unsigned of 32 or 64 bits."""
    rows_col, rows = _level(column, what)
    if not av.is_list_type(rows_col.type):
        raise _not_3d(what, f"a list of {rows_col.type}")
    layers_col, layers = _level(rows_col, what)
    if not av.is_list_type(layers_col.type):
        raise _not_3d(what, f"a list of lists of {layers_col.type}")
    ids_col, ks = _level(layers_col, what)
    if not pa.types.is_integer(ids_col.type):
        raise InputError(
            f"{what}: expected integer expert ids, found {ids_col.type}",
            "map the routes column (ids of the experts chosen per layer).",
        )
    n_layers = _constant(layers, len(rows_col), what, "layer count", "rows")
    k = _constant(ks, len(layers_col), what, "top-k", "layers")
    if n_layers is None or k is None or n_layers * k == 0:
        ids = np.zeros((0, n_layers or 0, k or 0), dtype=np.int32)
    else:
        ids = _ints(ids_col, what).reshape(-1, n_layers, k)
    if isinstance(rows, int):
        rows = np.full(len(column), rows, dtype=np.int64)
    return _place_lists(ids, rows.astype(np.int64, copy=False), name, what, layout)


def _level(col: pa.Array, what: str) -> tuple[pa.Array, np.ndarray | int]:
    """(the values, each entry's length) of one list level, from its offsets (no copy); the size
    of a fixed-size list. List views and nulls take the general path (its errors)."""
    t = col.type
    if not col.null_count:
        if pa.types.is_fixed_size_list(t):
            return col.flatten(), t.list_size
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return col.flatten(), np.diff(numpy_of(col.offsets))
    return av.list_values(col, what)


def _dense(values: np.ndarray, name: str, what: str, layout: Layout) -> SideRoutes:
    """``[sequences, rows, layers, top_k]``: every sequence's rows (the padded width) placed as
    a list column's are: as many as the logprobs, or the prompt part's width more (trimmed,
    its last row kept). The ids stay in their own type, as a view of the array. verl fills a
    row the engine did not record with zeros, whichever the width."""
    n, rows, layers, k = values.shape
    ids = values.reshape(n * rows, layers, k)
    side = _place_lists(ids, np.full(n, rows, dtype=np.int64), name, what, layout)
    side.zeros_unrecorded, side.kind = True, "batch key"
    return side


def _place_lists(
    ids: np.ndarray, rows: np.ndarray, name: str, what: str, layout: Layout
) -> SideRoutes:
    """Rows of a list column: as many as the logprobs (first row: response index 0), or as many as
    prompt + response (verl: the prompt part trimmed, its last row kept: first row -1)."""
    offsets = offsets_from_lengths(rows)
    first = np.zeros(len(rows), dtype=np.int64)
    if layout.widths is not None:
        whole = (rows == layout.widths + layout.lengths) & (rows != layout.lengths)
    else:
        whole = np.zeros(len(rows), dtype=bool)
    bad = ~whole & (rows != layout.lengths)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        whole_len = (
            ""
            if layout.widths is None
            else (f" or {int(layout.widths[i] + layout.lengths[i])} (prompt + response)")
        )
        raise InputError(
            f"{what}: {layout.at(i)}: {int(rows[i])} route rows, expected {int(layout.lengths[i])} (one "
            f"per logprob){whole_len}",
            f"dump `{name}` aligned with the logprobs (one [layers][top_k] list per token).",
        )
    if whole.any():  # the prompt part's rows come first: the response starts after them
        first = np.where(whole, -layout.widths, 0).astype(np.int64)  # type: ignore[operator]
    return SideRoutes(ids, offsets, first, name, zeros_unrecorded=bool(whole.any()))


def _sglang(
    column: pa.Array,
    name: str,
    what: str,
    layout: Layout,
    starts: np.ndarray | None,
    top_k: int,
) -> SideRoutes:
    """Base64 int32 ``[num_tokens, num_layers, top_k]`` per sequence, rows from absolute position
    ``start`` to ``seqlen - 2`` (the last token is never an input)."""
    if top_k <= 0:
        raise InputError(
            f"{what} holds base64 routes (SGLang): their top-k is not in the data",
            "give it with --routes-topk K (the model's moe_router_topk / num_experts_per_tok).",
        )
    _need_prompts(what, layout)
    starts = np.zeros(len(column), dtype=np.int64) if starts is None else starts
    fast = _sglang_column(column, layout, starts, top_k)
    if fast is not None:
        return _from_absolute(fast[0], fast[1], starts, name, layout)
    texts = column.to_pylist()  # one sequence at a time: the first bad row named
    parts, counts = [], np.zeros(len(texts), dtype=np.int64)
    n_layers = None
    for i, text in enumerate(texts):
        flat = _b64_int32(text, what, layout.at(i))
        expected = int(layout.prompts[i] + layout.lengths[i] - 1 - starts[i])
        if expected <= 0 or len(flat) % (expected * top_k):
            raise InputError(
                f"{what}: {layout.at(i)}: {len(flat)} ids do not fill {expected} rows (prompt "
                f"{int(layout.prompts[i])} + response {int(layout.lengths[i])} - 1 - start "
                f"{int(starts[i])}) of top-{top_k}",
                "check --routes-topk and the prompt lengths; SGLang returns rows for the "
                f"positions [{START_LEN}, seqlen - 1).",
            )
        layers = len(flat) // (expected * top_k)
        if n_layers is not None and layers != n_layers:
            raise _changed(what, "layer count", n_layers, layers, i)
        n_layers = layers
        parts.append(flat.reshape(expected, layers, top_k))
        counts[i] = expected
    ids = np.concatenate(parts) if parts else np.zeros((0, 0, top_k), np.int32)
    return _from_absolute(ids, counts, starts, name, layout)


def _sglang_column(
    column: pa.Array, layout: Layout, starts: np.ndarray, top_k: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """(ids ``[rows, layers, top_k]``, each sequence's rows) of the whole column decoded at once,
    or None when a sequence is not as expected (the per-sequence path then says which)."""
    decoded = routes_base64.decode_column(column)
    if decoded is None:
        return None
    ids, counts = decoded
    expected = (layout.prompts + layout.lengths - 1 - starts).astype(np.int64)
    if (expected <= 0).any() or (counts % (expected * top_k)).any():
        return None
    layers = counts // (expected * top_k)
    if layers[0] == 0 or (layers != layers[0]).any():
        return None
    return ids.reshape(-1, int(layers[0]), top_k), expected


def _prime(column: pa.Array, name: str, what: str, layout: Layout) -> SideRoutes:
    """``{data, shape, dtype}`` per sequence: raw bytes of ``shape`` rows from position 0
    (prompt + completion, or one fewer: the last token is never an input). The usual column,
    one dtype and binary data, is read as one array over the data's buffer (no copy)."""
    fields = [column.type.field(i).name for i in range(column.type.num_fields)]
    if not {"data", "shape"} <= set(fields):
        raise InputError(
            f"{what} is a struct with fields {sorted(fields)}, expected data, shape and dtype "
            "(prime-rl's RoutedExperts)",
            "map the routes column with --map rollout_routes=<column>.",
        )
    parts = dict(zip(fields, column.flatten(), strict=True))  # the struct's nulls in each
    data, shapes, dtypes = parts["data"], parts["shape"], parts.get("dtype")
    dtype = _one_dtype(dtypes)
    flat = (
        len(column) > 0
        and dtype is not None
        and (pa.types.is_binary(data.type) or pa.types.is_large_binary(data.type))
        and (pa.types.is_list(shapes.type) or pa.types.is_large_list(shapes.type))
        and pa.types.is_integer(shapes.type.value_type)
    )
    if not flat:
        return _prime_rows(column, data, shapes, dtypes, name, what, layout)
    shape, bad = _prime_shapes(data, shapes, dtype)
    if bad < len(column):  # a bad row: the per-row reading names it, with its message
        return _prime_rows(column, data, shapes, dtypes, name, what, layout)
    _need_prompts(what, layout)
    full = layout.prompts + layout.lengths
    wrong = (shape[:, 0] != full) & (shape[:, 0] != full - 1)
    if wrong.any():
        i = int(np.flatnonzero(wrong)[0])
        raise _absolute_shape(what, layout, i, shape[i].tolist())
    inner = {tuple(r) for r in np.unique(shape[:, 1:], axis=0).tolist()}
    if len(inner) > 1:
        raise _shapes_change(what, inner)
    layers, k = inner.pop()
    offsets, values = _binary_buffers(data)
    count = int(offsets[-1] - offsets[0]) // dtype.itemsize
    ids = np.frombuffer(values, dtype=dtype, count=count, offset=int(offsets[0]))
    if not ids.flags.aligned:  # the compiled passes read aligned arrays
        ids = ids.copy()
    ids = ids.reshape(-1, layers, k)
    return _from_absolute(ids, shape[:, 0].copy(), np.zeros(len(shape), np.int64), name, layout)


def _one_dtype(dtypes: pa.Array | None) -> np.dtype | None:
    """The column's one dtype (null or empty: uint8, prime-rl's default); None when the rows
    differ or one is not an integer type of :data:`DTYPES` (read row by row, with its errors)."""
    if dtypes is None:
        return np.dtype("uint8")
    if not (pa.types.is_string(dtypes.type) or pa.types.is_large_string(dtypes.type)):
        return None
    found = {v or "uint8" for v in pc.unique(dtypes).to_pylist()}
    if len(found) != 1 or not found <= set(DTYPES):
        return None
    return np.dtype(found.pop())


def _prime_shapes(data: pa.Array, shapes: pa.Array, dtype: np.dtype) -> tuple[np.ndarray, int]:
    """(each row's ``[rows, layers, top_k]``, int64 ``[n, 3]``; the first row that is null, not of
    three dimensions or whose bytes do not fill its shape: ``n`` when none)."""
    n = len(shapes)
    null = ~(valid_of(data) & valid_of(shapes))
    dims = list_lengths(shapes, fill=0)
    bad = null | (dims != 3)
    stop = int(np.flatnonzero(bad)[0]) if bad.any() else n  # rows before it have 3 dims
    head = numpy_of(shapes.slice(0, stop).flatten().cast(pa.int64()), fill=-1)  # null: no size
    shape = np.zeros((n, 3), dtype=np.int64)
    shape[:stop] = head.reshape(stop, 3)
    offsets, _ = _binary_buffers(data)
    size = np.diff(offsets)[:stop]
    wrong = np.flatnonzero(shape[:stop].prod(axis=1) * dtype.itemsize != size)
    return shape, int(wrong[0]) if len(wrong) else stop


def _binary_buffers(data: pa.Array) -> tuple[np.ndarray, pa.Buffer]:
    """A binary array's offsets (of its rows, its slice taken into account) and data buffer."""
    wide = pa.types.is_large_binary(data.type)
    _, offsets, values = data.buffers()
    every = np.frombuffer(offsets, dtype=np.int64 if wide else np.int32)
    return every[data.offset : data.offset + len(data) + 1].astype(np.int64), values


def _prime_rows(
    column: pa.Array,
    data: pa.Array,
    shapes: pa.Array,
    dtypes: pa.Array | None,
    name: str,
    what: str,
    layout: Layout,
) -> SideRoutes:
    """The rows one at a time (dtypes that differ between rows, other Arrow types)."""
    arrays = [_prime_row(data, shapes, dtypes, i, what, layout) for i in range(len(column))]
    return _absolute_arrays(arrays, name, what, layout)


def _prime_row(
    data: pa.Array, shapes: pa.Array, dtypes: pa.Array | None, i: int, what: str, layout: Layout
) -> np.ndarray:
    if not data[i].is_valid or not shapes[i].is_valid:
        raise InputError(
            f"{what}: {layout.at(i)} is null (expected data, shape and dtype)",
            "drop rows without routes, or dump -1 rows for them.",
        )
    dtype = (dtypes[i].as_py() if dtypes is not None else None) or "uint8"
    return _prime_array(data[i].as_buffer(), shapes[i].as_py(), dtype, what, layout.at(i))


def _absolute_arrays(arrays: list[np.ndarray], name: str, what: str, layout: Layout) -> SideRoutes:
    """``(rows, layers, top_k)`` arrays per sequence, rows from position 0 of prompt + response
    (as many, or one fewer: the last token is never an input); copied once, in their own type."""
    _need_prompts(what, layout)
    arrays = [np.asarray(v) for v in arrays]
    counts = np.zeros(len(arrays), dtype=np.int64)
    for i, arr in enumerate(arrays):
        full = int(layout.prompts[i] + layout.lengths[i])
        if arr.ndim != 3 or arr.shape[0] not in (full, full - 1):
            raise _absolute_shape(what, layout, i, list(arr.shape))
        if not np.issubdtype(arr.dtype, np.integer):
            raise InputError(
                f"{what}: {layout.at(i)}: expert ids of type {arr.dtype}, expected integers",
                "map the routes key (ids of the experts chosen per layer).",
            )
        counts[i] = arr.shape[0]
    shapes = {a.shape[1:] for a in arrays}
    if len(shapes) > 1:
        raise _shapes_change(what, shapes)
    layers, k = shapes.pop() if shapes else (0, 0)
    dtype = np.result_type(*arrays) if arrays else np.int32
    dtype = dtype if dtype.itemsize <= 4 and dtype != np.uint32 else np.dtype(np.int64)
    ids = np.empty((int(counts.sum()), layers, k), dtype=dtype)  # the dump's own int type
    offsets = offsets_from_lengths(counts)
    for arr, lo, hi in zip(arrays, offsets[:-1], offsets[1:], strict=True):
        ids[lo:hi] = arr
    return _from_absolute(ids, counts, np.zeros(len(arrays), np.int64), name, layout)


def _absolute_shape(what: str, layout: Layout, i: int, shape: list[int]) -> InputError:
    full = int(layout.prompts[i] + layout.lengths[i])
    return InputError(
        f"{what}: {layout.at(i)}: shape {shape}, expected [{full - 1} or {full} rows, layers, "
        f"top_k] (prompt {int(layout.prompts[i])} + response {int(layout.lengths[i])})",
        "the routes cover the whole sequence from its first prompt token; check the prompt "
        "lengths.",
    )


def _shapes_change(what: str, shapes: set[tuple[int, ...]]) -> InputError:
    return InputError(
        f"{what}: the [layers, top_k] of the routes change within the file: "
        f"{sorted(list(s) for s in shapes)}",
        "routes of one run come from one model: ingest each model into its own run.",
    )


def _prime_array(data: pa.Buffer, shape: list, dtype: str, what: str, at: str) -> np.ndarray:
    """One sequence's raw bytes as an array of ``shape`` (no copy)."""
    if dtype not in DTYPES or len(shape) != 3:
        raise InputError(
            f"{what}: {at}: dtype {dtype!r}, shape {shape} (expected one of "
            f"{', '.join(DTYPES)} and [rows, layers, top_k])",
            "write the routes with numpy's tobytes() of a (tokens, layers, top_k) array.",
        )
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if data.size != size:
        raise InputError(
            f"{what}: {at}: {data.size} bytes, expected {size} for shape {shape} of {dtype}",
            "the data must be the array's raw bytes (numpy tobytes()).",
        )
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def _from_absolute(
    ids: np.ndarray, counts: np.ndarray, starts: np.ndarray, name: str, layout: Layout
) -> SideRoutes:
    """Rows for absolute positions ``starts[i]...``: the first is response index ``start -
    prompt`` (rows before the last prompt position are not used)."""
    return SideRoutes(ids, offsets_from_lengths(counts), starts - layout.prompts, name)


def _need_prompts(what: str, layout: Layout) -> None:
    if (layout.prompts < 0).any():
        i = int(np.flatnonzero(layout.prompts < 0)[0])
        raise InputError(
            f"{what}: {layout.at(i)}: the routes cover the whole sequence, and its prompt length is "
            "unknown",
            "add a prompt_length column (or the prompt ids / attention_mask) to place them.",
        )


def _b64_int32(text: str | None, what: str, at: str) -> np.ndarray:
    if text is None:
        raise InputError(
            f"{what}: {at} is null (expected base64 routes)",
            "drop rows without routes, or dump -1 rows for them.",
        )
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InputError(
            f"{what}: {at} is not base64 (found {text[:20]!r}...)",
            "SGLang's routed_experts are base64 of int32; map the right column.",
        ) from None
    if len(raw) % 4:
        raise InputError(
            f"{what}: {at}: {len(raw)} bytes, not a whole number of int32",
            "SGLang's routed_experts are base64 of int32; map the right column.",
        )
    return np.frombuffer(raw, dtype="<i4").astype(np.int32)


def _ints(values: pa.Array, what: str) -> np.ndarray:
    """The ids in their own type when they are signed or of up to 16 bits (no copy: int64,
    what ``ndarray.tolist()`` gives, too: the checks read them as they are, and an id beyond
    int32 is theirs to refuse, naming the sequence); unsigned ones of 32 or 64 bits narrowed
    to int16 in one compiled pass on the routing threads that also finds their range, or to
    int32 when int16 cannot hold them (an id beyond int32 is an error, not wrapped)."""
    if values.null_count:
        raise InputError(
            f"{what}: {values.null_count} null expert id(s)",
            "write -1 where no route was recorded.",
        )
    t = values.type
    ids = numpy_of(values)
    if t.bit_width <= 16 or t in (pa.int32(), pa.int64()) or not len(ids):
        return ids if len(ids) else ids.astype(np.int16)
    from mismatchctl.ingest.routing_kernels import narrow_range  # numba: only when needed

    narrow = np.empty(len(ids), dtype=np.int16)
    bounds = over_ranges(narrow_range, len(ids), ids, narrow)
    lo, hi = min(b[0] for b in bounds), max(b[1] for b in bounds)
    for kind in (np.int16, np.int32):
        info = np.iinfo(kind)
        if info.min <= lo and hi <= info.max:
            return narrow if kind is np.int16 else ids.astype(np.int32)
    raise InputError(f"{what}: an expert id beyond int32", "map the routes column (expert ids).")


def _constant(
    lengths: np.ndarray | int, entries: int, what: str, name: str, within: str
) -> int | None:
    """The one length of a level's ``entries`` (None: no entries); a length that changes is an
    error naming the first entry where it does."""
    if entries == 0:
        return None
    if isinstance(lengths, int):
        return lengths
    lo, hi = int(lengths.min()), int(lengths.max())
    if lo != hi:
        at = int(np.flatnonzero(lengths != lengths[0])[0])
        raise _changed(what, name, int(lengths[0]), int(lengths[at]), at, within)
    return lo


def _changed(what: str, name: str, was: int, now: int, at: int, within: str = "rows") -> Exception:
    return InputError(
        f"{what}: the {name} changes within the routes: {was}, then {now} (at entry {at} of the "
        f"{within})",
        "routes of one run come from one model: every token has the same layers and top-k.",
    )


def _not_3d(what: str, found: str) -> Exception:
    return InputError(
        f"{what}: expected a list of [layers][top_k] lists per sequence, found {found}",
        "dump the routes as ndarray.tolist() of a (tokens, layers, top_k) array.",
    )
