"""From both sides' routes of a batch to the compact per-token routing rows of the store.

Per sequence both sides are placed on one frame of rows: response index ``-1`` (the last prompt
position) to ``T - 1``. A row is *recorded* on a side when it holds no ``-1``; a row recorded on
both sides is *compared*: per layer, the two top-k sets are equal or not (order ignored), and
overlap in ``|A ∩ B|`` experts. Per model token ``t`` the store keeps the comparison of its own
row and of the row that produced its logprob (``t - 1`` when the engines record routes per input
position, the default; ``t`` with ``--routes-aligned output``), and whether any compared row before
its own differs (``docs/metrics.md``).

Capture bugs are detected here and never taken as routes: rows at the padded tail that repeat the
last real row, and rows filled with one id (a 0 fill where -1 was meant); both count as not
recorded.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numba
import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.errors import InputError, UsageError
from mismatchctl.ingest.routes import MAX_LAYERS, SideRoutes

ALIGNED_INPUT = "input"
ALIGNED_OUTPUT = "output"
ALIGNMENTS = (ALIGNED_INPUT, ALIGNED_OUTPUT)
PAIRED_UNPAIRED, PAIRED_SAME, PAIRED_FLIPPED = -1, 0, 1
BUG_REPEAT = "padded rows repeating the last real row"
BUG_FILL = "rows filled with one expert id (a 0 fill where -1 was meant)"


@dataclass
class RouteTally:
    """What the routes of a source held: their shape, and the rows not taken as routes."""

    layers: int = 0
    top_k: int = 0
    max_id: int = -1
    bugs: Counter[str] = field(default_factory=Counter)  # kind -> rows (both sides)
    missing_rows: int = 0  # -1 rows at model-token positions (either side)

    def add(self, other: RouteTally, what: str) -> None:
        if (
            self.layers
            and other.layers
            and (self.layers, self.top_k)
            != (
                other.layers,
                other.top_k,
            )
        ):
            raise InputError(
                f"{what}: routes of {other.layers} layers x top-{other.top_k}, after "
                f"{self.layers} layers x top-{self.top_k} earlier in the run",
                "routes of one run come from one model: ingest each model into its own run.",
            )
        self.layers = self.layers or other.layers
        self.top_k = self.top_k or other.top_k
        self.max_id = max(self.max_id, other.max_id)
        self.bugs.update(other.bugs)
        self.missing_rows += other.missing_rows


@dataclass
class RouteOptions:
    aligned: str = ALIGNED_INPUT
    num_experts: int | None = None  # ids must be < it when given
    keep_routes: bool = False
    top_k: int = 0  # of encodings that do not carry it (SGLang's base64), 0: not given


def check_route_options(opts: RouteOptions) -> RouteOptions:
    if opts.aligned not in ALIGNMENTS:
        raise UsageError(
            f"--routes-aligned {opts.aligned!r} is not one of {', '.join(ALIGNMENTS)}",
            "input: row t holds the experts chosen while token t was the input (verl, vLLM, "
            "SGLang); output: row t holds those that produced token t.",
        )
    for name, value in (("--routes-topk", opts.top_k), ("--num-experts", opts.num_experts)):
        if value is not None and (value < 0 or (name == "--num-experts" and value == 0)):
            raise UsageError(f"{name} {value}: expected a positive count", f"give {name} N.")
    return opts


def routing_table(
    rollout: SideRoutes,
    trainer: SideRoutes,
    lengths: np.ndarray,
    model: np.ndarray,
    where: np.ndarray,
    ctx_what: str,
    sample_ids: list[str],
    opts: RouteOptions,
) -> tuple[dict[str, pa.Array], RouteTally]:
    """The routing columns of the batch's model tokens (``where``: their flat positions)."""
    _same_shape(rollout, trainer, ctx_what)
    tally = RouteTally(rollout.layers, rollout.top_k)
    frame = offsets_frame(lengths)
    a = _placed(rollout, lengths, frame, ctx_what, sample_ids)
    b = _placed(trainer, lengths, frame, ctx_what, sample_ids)
    for side, ids in ((rollout, a), (trainer, b)):
        _check_ids(ids, side.column, ctx_what, frame, sample_ids, opts.num_experts)
        tally.max_id = max(tally.max_id, int(ids.max()) if ids.size else -1)
        _capture_bugs(ids, lengths, model, frame, tally)
        _check_distinct(ids, side.column, ctx_what, frame, sample_ids)
    equal, overlap, compared = compare_rows(a, b)
    own = where + np.repeat(np.arange(len(lengths)) + 1, np.diff(_model_offsets(model, lengths)))
    producing = own - 1 if opts.aligned == ALIGNED_INPUT else own
    differs = compared & (equal != full_mask(a.shape[1]))
    before = _differs_before(differs, frame)
    tally.missing_rows = int((~compared[own]).sum())
    cols = {
        S.ROUTE_EQUAL: pa.array(equal[own], pa.uint64(), mask=~compared[own]),
        S.ROUTE_OVERLAP: pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(a.shape[1]),
            len(own),
            [_validity(compared[own]), pa.py_buffer(np.ascontiguousarray(overlap[own]))],
        ),
        S.ROUTE_PAIRED: pa.array(
            np.where(
                compared[producing],
                np.where(differs[producing], PAIRED_FLIPPED, PAIRED_SAME),
                PAIRED_UNPAIRED,
            ).astype(np.int8),
            pa.int8(),
        ),
        S.ROUTE_FLIP_BEFORE: pa.array(before[own], pa.bool_()),
        S.ROUTE_TOP_K: pa.array(np.full(len(own), a.shape[2], np.uint8), pa.uint8()),
    }
    if opts.keep_routes:
        width = a.shape[1] * a.shape[2]
        for name, ids in ((S.ROLLOUT_ROUTES, a), (S.TRAINER_ROUTES, b)):
            flat = pa.array(ids[own].reshape(-1).astype(np.int32), pa.int32())
            cols[name] = pa.FixedSizeListArray.from_arrays(flat, width)
    return cols, tally


def full_mask(layers: int) -> np.uint64:
    return np.uint64((1 << layers) - 1) if layers < 64 else np.uint64(0xFFFFFFFFFFFFFFFF)


def offsets_frame(lengths: np.ndarray) -> np.ndarray:
    """Start of each sequence's frame (``T + 1`` rows: response index -1 to T - 1)."""
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths + 1, out=out[1:])
    return out


def _model_offsets(model: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    ends = np.cumsum(lengths)
    counts = np.add.reduceat(model.astype(np.int64), np.r_[0, ends[:-1]]) if len(model) else 0
    counts = np.where(lengths > 0, counts, 0)
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _same_shape(a: SideRoutes, b: SideRoutes, what: str) -> None:
    if len(a.ids) and len(b.ids) and a.ids.shape[1:] != b.ids.shape[1:]:
        raise InputError(
            f"{what}: `{a.column}` has {a.layers} layers x top-{a.top_k}, `{b.column}` has "
            f"{b.layers} layers x top-{b.top_k}",
            "both sides' routes must come from the same model (same layers and top-k).",
        )
    if len(a.ids) and a.layers > MAX_LAYERS:
        raise InputError(
            f"{what}: `{a.column}` has {a.layers} MoE layers; at most {MAX_LAYERS} are compared",
            "leave the routes out of this ingest (drop the --map of the routes columns).",
        )


def _placed(
    side: SideRoutes, lengths: np.ndarray, frame: np.ndarray, what: str, sample_ids: list[str]
) -> np.ndarray:
    """The side's rows on the frame (-1 where it has none)."""
    rows = np.diff(side.offsets)
    last = side.first + rows  # one past the last row's response index
    over = (side.first < -1) | (last > lengths)
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise InputError(
            f"{what}: sample `{sample_ids[i]}`: column `{side.column}` has {int(rows[i])} route "
            f"rows from response index {int(side.first[i])}, past its {int(lengths[i])} logprobs",
            "dump one route row per token, aligned with the logprobs.",
        )
    k_shape = side.ids.shape[1:] if len(side.ids) else (0, 0)
    out = np.full((int(frame[-1]), *k_shape), -1, dtype=np.int32)
    if len(side.ids):
        seq = np.repeat(np.arange(len(rows)), rows)
        index = (
            frame[:-1][seq] + 1 + side.first[seq] + (np.arange(len(side.ids)) - side.offsets[seq])
        )
        out[index] = side.ids
    return out


def _check_ids(
    ids: np.ndarray,
    column: str,
    what: str,
    frame: np.ndarray,
    sample_ids: list[str],
    num_experts: int | None,
) -> None:
    """Ids in ``[0, num_experts)`` (or -1); a row is -1 on all its slots or on none."""
    if ids.size == 0:
        return
    high = num_experts if num_experts is not None else np.iinfo(np.int32).max
    bad_id = (ids < -1) | (ids >= high)
    neg = ids == -1
    partial = neg.any(axis=(1, 2)) & ~neg.all(axis=(1, 2))
    for rows, problem in ((bad_id.any(axis=(1, 2)), "id"), (partial, "partial")):
        if not rows.any():
            continue
        r = int(np.flatnonzero(rows)[0])
        i = int(np.searchsorted(frame, r, side="right") - 1)
        j = r - int(frame[i]) - 1
        row = ids[r]
        if problem == "id":
            found = int(row[(row < -1) | (row >= high)][0])
            expected = f"ids in [0, {num_experts})" if num_experts else "ids >= 0 (or -1)"
            hint = "check --num-experts, and map the right routes column."
        else:
            found, expected = "some slots -1, others not", "-1 on every slot or on none"
            hint = "write -1 on every slot of a position whose route was not recorded."
        raise InputError(
            f"{what}: sample `{sample_ids[i]}`: column `{column}`, response index {j}: expected "
            f"{expected}, found {found}",
            hint,
        )


def _check_distinct(
    ids: np.ndarray, column: str, what: str, frame: np.ndarray, sample_ids: list[str]
) -> None:
    """A layer's top-k are distinct experts (rows filled with one id are capture bugs, set
    to -1 before this check)."""
    if ids.size == 0 or ids.shape[2] < 2:
        return
    s = np.sort(ids, axis=2)
    dup = ((s[:, :, 1:] == s[:, :, :-1]) & (s[:, :, 1:] >= 0)).any(axis=(1, 2))
    if dup.any():
        r = int(np.flatnonzero(dup)[0])
        i = int(np.searchsorted(frame, r, side="right") - 1)
        layer = int(np.flatnonzero((s[r, :, 1:] == s[r, :, :-1]).any(axis=1))[0])
        raise InputError(
            f"{what}: sample `{sample_ids[i]}`: column `{column}`, response index "
            f"{r - int(frame[i]) - 1}, layer {layer}: expected {ids.shape[2]} distinct expert "
            f"ids, found {ids[r, layer].tolist()}",
            "the routes column must hold each position's top-k expert ids per layer.",
        )


def _capture_bugs(
    ids: np.ndarray, lengths: np.ndarray, model: np.ndarray, frame: np.ndarray, tally: RouteTally
) -> None:
    """Rows filled with one id everywhere (top-k > 1), and rows of the padded tail (masked
    positions after the last model token) equal to the last real row: counted, set to -1."""
    if ids.size == 0:
        return
    if ids.shape[2] > 1:
        flat = ids.reshape(len(ids), -1)
        fill = (flat == flat[:, :1]).all(axis=1) & (flat[:, 0] >= 0)
        if fill.any():
            tally.bugs[BUG_FILL] += int(fill.sum())
            ids[fill] = -1
    tail = _padded_tail(lengths, model, frame)
    if tail.any():
        last_real = np.maximum.accumulate(np.where(~tail, np.arange(len(tail)), 0))
        repeat = tail & (ids >= 0).all(axis=(1, 2))
        repeat &= (ids == ids[last_real]).all(axis=(1, 2))
        if repeat.any():
            tally.bugs[BUG_REPEAT] += int(repeat.sum())
            ids[repeat] = -1


def _padded_tail(lengths: np.ndarray, model: np.ndarray, frame: np.ndarray) -> np.ndarray:
    """Frame rows at masked positions after each sequence's last model token."""
    out = np.zeros(int(frame[-1]), dtype=bool)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    has = np.flatnonzero(lengths > 0)
    for i in has.tolist():  # per sequence: its last model position
        seg = model[starts[i] : ends[i]]
        hits = np.flatnonzero(seg)
        last = int(hits[-1]) if len(hits) else -1
        if last + 1 < lengths[i]:
            out[frame[i] + 2 + last : frame[i] + 1 + lengths[i]] = True
    return out


def _differs_before(differs: np.ndarray, frame: np.ndarray) -> np.ndarray:
    """Per frame row: whether a row before it in its sequence differs."""
    c = np.concatenate([[0], np.cumsum(differs, dtype=np.int64)])
    seq_start = np.repeat(frame[:-1], np.diff(frame))
    return c[np.arange(len(differs))] - c[seq_start] > 0


def _validity(valid: np.ndarray) -> pa.Buffer | None:
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def compare_rows(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: the bitmask of layers whose top-k sets are equal, the per-layer overlap
    ``|A ∩ B|`` (uint8 [rows, layers]), and whether the row is recorded on both sides."""
    n = len(a)
    layers = a.shape[1] if a.ndim == 3 else 0
    equal = np.zeros(n, dtype=np.uint64)
    overlap = np.zeros((n, layers), dtype=np.uint8)
    compared = np.zeros(n, dtype=np.bool_)
    if n and layers:
        _compare(a, b, equal, overlap, compared)
    return equal, overlap, compared


@numba.njit(cache=True, nogil=True)
def _compare(a, b, equal, overlap, compared):  # pragma: no cover - compiled
    n, layers, k = a.shape
    for r in range(n):
        if a[r, 0, 0] < 0 or b[r, 0, 0] < 0:
            continue
        compared[r] = True
        bits = np.uint64(0)
        for layer in range(layers):
            common = 0
            for i in range(k):
                x = a[r, layer, i]
                for j in range(k):
                    if b[r, layer, j] == x:
                        common += 1
                        break
            overlap[r, layer] = common
            if common == k:
                bits |= np.uint64(1) << np.uint64(layer)
        equal[r] = bits
