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
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.columns import arrow_as
from mismatchctl.errors import InputError, UsageError
from mismatchctl.ingest.routes import MAX_LAYERS, SideRoutes
from mismatchctl.ingest.routing_threads import over_ranges
from mismatchctl.options import ROUTES_INPUT, ROUTES_OUTPUT
from mismatchctl.stats.routing_sums import NOT_SHIFTED, SHIFTS, shifted_sums

if TYPE_CHECKING:
    from types import ModuleType


def _kernels() -> ModuleType:
    """The compiled routing kernels, imported on first use (importing the library, or
    ``mismatchctl.dump`` in a trainer, does not import numba)."""
    from mismatchctl.ingest import routing_kernels

    return routing_kernels


ALIGNED_INPUT = ROUTES_INPUT  # the names `--routes-aligned` takes (options.py)
ALIGNED_OUTPUT = ROUTES_OUTPUT
ALIGNMENTS = (ALIGNED_INPUT, ALIGNED_OUTPUT)
# route_paired: -1 unpaired, 0 same, PAIRED_FLIPPED + l: differs, l its lowest differing layer
PAIRED_UNPAIRED, PAIRED_SAME, PAIRED_FLIPPED = -1, 0, 1
ALIGNMENT_EVERY = 32
"""The alignment test compares every 32nd row of each sequence (response index 0, 32, 64...):
a comparison set a position or a layer off walks each layer's ids (unrelated sets part at
their first id, still 4 x layers x top-k reads a row), 0.53 us a row at 24 layers x top-8 on
one core against 0.03-0.06 us for the aligned comparison. Every 8th row took 0.27-0.44 us a
model token within an ingest, 10-30% of its CPU; every 32nd takes 0.06-0.09 us, 3-7%
(``bench/routes_alignment.py``), with one row of each sequence however short and thousands in
a two-step run."""
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
    zero_rows: int = 0  # verl's rows of zeros (not recorded) from response index -1 on
    # the model tokens' layer routes agreeing as aligned and at each shift of the alignment
    # test (``SHIFTS``): equal layers and layers compared, one row each
    agreement: np.ndarray = field(default_factory=lambda: np.zeros((5, 2), np.int64))

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
        self.zero_rows += other.zero_rows
        self.agreement = self.agreement + other.agreement

    def misaligned(self) -> tuple[str, float, float] | None:
        """The shift at which the trainer's routes agree with the rollout's more than aligned,
        with both shares of the layer routes (None: aligned agrees most, or nothing compared):
        routes that are not their positions', which ``diagnose`` judges (``route_capture``)."""
        shares = [e / n if n else None for e, n in self.agreement.tolist()]
        aligned, shifted = shares[0], shares[1:]
        found = [(s, name) for s, name in zip(shifted, SHIFTS, strict=True) if s is not None]
        if aligned is None or not found:
            return None
        best, name = max(found)
        return (name, aligned, best) if best > aligned else None


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
    layers, top_k = _shape(rollout, trainer)
    tally = RouteTally(layers, top_k)
    frame = offsets_frame(lengths)
    tail = _padded_tail(lengths, model, frame)
    a_of = _frame_index(rollout, lengths, frame, ctx_what, sample_ids)
    a_dead, _ = _scan(rollout, a_of, ctx_what, sample_ids, opts.num_experts, tally)
    b_of = _frame_index(trainer, lengths, frame, ctx_what, sample_ids)
    twin = (rollout, _twins(a_of, b_of, len(trainer.ids)), a_dead)
    b_dead, b_same = _scan(trainer, b_of, ctx_what, sample_ids, opts.num_experts, tally, twin)
    sides = [(rollout, a_of, a_dead), (trainer, b_of, b_dead)]
    for side, of, dead in sides:  # after both scans: a twin's verdict is its fill or not
        if side.ids.size:
            tally.bugs[BUG_REPEAT] += int(
                _kernels().tail_repeats(_flat_rows(side.ids), of, dead, tail)
            )
    if not tally.bugs[BUG_REPEAT]:
        del tally.bugs[BUG_REPEAT]
    equal, overlap, compared = _compare(sides, len(tail), layers, b_same)
    own = where + np.repeat(np.arange(len(lengths)) + 1, np.diff(_model_offsets(model, lengths)))
    tally.missing_rows = int((~compared[own]).sum())
    cols = _columns(equal, overlap, compared, own, frame, opts.aligned, (layers, top_k))
    cols[S.ROUTE_SHIFTED] = _shifted(sides, frame, own, layers, top_k)
    tally.agreement = _agreement(equal[own], compared[own], cols[S.ROUTE_SHIFTED], layers)
    if opts.keep_routes:
        for name, (side, of, dead) in zip((S.ROLLOUT_ROUTES, S.TRAINER_ROUTES), sides, strict=True):
            rows = _gather(side.ids, of, dead, own, layers, top_k)
            flat = arrow_as(rows.reshape(-1), pa.int32())
            cols[name] = pa.FixedSizeListArray.from_arrays(flat, layers * top_k)
    return cols, tally


def _columns(
    equal: np.ndarray,
    overlap: np.ndarray,
    compared: np.ndarray,
    own: np.ndarray,
    frame: np.ndarray,
    aligned: str,
    shape: tuple[int, int],
) -> dict[str, pa.Array]:
    """The compact routing columns of the model tokens whose own frame rows are ``own``: one
    compiled walk (``routing_kernels.token_columns``)."""
    layers, top_k = shape
    n = len(own)
    eq, valid, before = np.empty(n, np.uint64), np.empty(n, np.bool_), np.empty(n, np.bool_)
    ov, paired = np.empty((n, layers), np.uint8), np.empty(n, np.int8)
    shift = 1 if aligned == ALIGNED_INPUT else 0  # the row that produced the token's logprob
    _kernels().token_columns(
        equal, overlap, compared, frame, own, shift, layers, eq, ov, valid, paired, before
    )
    return {
        S.ROUTE_EQUAL: arrow_as(eq, pa.uint64(), missing=~valid),
        S.ROUTE_OVERLAP: pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(layers), n, [_validity(valid), pa.py_buffer(ov)]
        ),
        S.ROUTE_PAIRED: arrow_as(paired, pa.int8()),
        S.ROUTE_FLIP_BEFORE: arrow_as(before, pa.bool_()),
        S.ROUTE_TOP_K: arrow_as(np.full(n, top_k, np.uint8), pa.uint8()),
    }


def _shifted(
    sides: list[tuple[SideRoutes, np.ndarray, np.ndarray]],
    frame: np.ndarray,
    own: np.ndarray,
    layers: int,
    top_k: int,
) -> pa.Array:
    """Per model token, the layers agreeing with the trainer's own row set a position before,
    a position after, a layer below and a layer above on the rollout's side (four bytes,
    ``routing_kernels.shifted_agreement``; ``NOT_SHIFTED`` where not compared, and on the rows
    outside the ``ALIGNMENT_EVERY`` sample)."""
    (a, a_of, a_dead), (b, b_of, b_dead) = sides
    out = np.full((int(frame[-1]), 4), NOT_SHIFTED, dtype=np.uint8)
    if a.ids.size and b.ids.size and layers:
        a_ids, b_ids = _flat_rows(a.ids), _flat_rows(b.ids)
        _kernels().shifted_agreement(
            a_ids, a_of, a_dead, b_ids, b_of, b_dead, frame, layers, top_k, ALIGNMENT_EVERY, out
        )
    mine = np.ascontiguousarray(out[own])
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(4), len(own), [None, pa.py_buffer(mine)])


def _agreement(
    equal: np.ndarray, compared: np.ndarray, shifted: pa.Array, layers: int
) -> np.ndarray:
    """The batch's rows of ``RouteTally.agreement``: the model tokens' equal layers and layers
    compared, aligned (``equal``'s bits over the compared rows) and at each shift of the test
    (``shifted``'s bytes over the rows it compared)."""
    out = np.zeros((5, 2), np.int64)
    bits = np.ascontiguousarray(equal[compared]).view(np.uint8)
    out[0] = int(np.unpackbits(bits).sum()), int(compared.sum()) * layers
    raw = np.frombuffer(shifted.buffers()[1], np.uint8).reshape(-1, 4)
    out[1:, 0], out[1:, 1] = shifted_sums(raw, layers)
    return out


def _shape(a: SideRoutes, b: SideRoutes) -> tuple[int, int]:
    for side in (a, b):
        if len(side.ids):
            return side.layers, side.top_k
    return 0, 0


def _compare(
    sides: list[tuple[SideRoutes, np.ndarray, np.ndarray]], n: int, layers: int, b_same: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per frame row: equal-layers bitmask, per-layer overlap (uint8), compared on both sides;
    ``b_same``: the second side's rows its scan found equal to their twins (not read again)."""
    equal = np.zeros(n, dtype=np.uint64)
    overlap = np.zeros((n, layers), dtype=np.uint8)
    compared = np.zeros(n, dtype=np.bool_)
    (a, a_of, a_dead), (b, b_of, b_dead) = sides
    if a.ids.size and b.ids.size and layers:
        a_ids, b_ids = _flat_rows(a.ids), _flat_rows(b.ids)
        words = _kernels().compare_words(a_ids, b_ids)
        args = (a_ids, a_of, a_dead, b_ids, b_of, b_dead, b_same, *words, layers, a.top_k)
        over_ranges(_kernels().compare_range, n, *args, equal, overlap, compared)
    return equal, overlap, compared


def _gather(
    ids: np.ndarray, of: np.ndarray, dead: np.ndarray, own: np.ndarray, layers: int, k: int
) -> np.ndarray:
    """The rows of the model tokens (-1 where none, or a capture bug), int32 [tokens, L, K]."""
    out = np.full((len(own), layers, k), -1, dtype=np.int32)
    rows = of[own]
    ok = rows >= 0
    ok[ok] = ~dead[rows[ok]]
    if len(ids):
        out[ok] = ids[rows[ok]]
    return out


def _flat_rows(ids: np.ndarray) -> np.ndarray:
    """``[rows, layers, top_k]`` ids as the kernels take them: C-contiguous ``[rows, layers *
    top_k]`` (a view when they are contiguous already, as every decoder leaves them)."""
    return np.ascontiguousarray(ids).reshape(len(ids), -1)


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


def _frame_index(
    side: SideRoutes, lengths: np.ndarray, frame: np.ndarray, what: str, sample_ids: list[str]
) -> np.ndarray:
    """Per frame row, the side's row there (-1: none); rows before response index -1 (the
    prompt's earlier positions) are not placed."""
    rows = np.diff(side.offsets)
    over = side.first + rows > lengths
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise InputError(
            f"{what}: sample `{sample_ids[i]}`: {side.named} has {int(rows[i])} route "
            f"rows from response index {int(side.first[i])}, past its {int(lengths[i])} logprobs",
            "dump one route row per token, aligned with the logprobs.",
        )
    of = np.full(int(frame[-1]), -1, dtype=np.int64)
    if len(side.ids):  # within the frame: no sequence's rows run past its logprobs (above)
        _kernels().place_rows(side.offsets, side.first, frame, of)
    return of


def _twins(a_of: np.ndarray, b_of: np.ndarray, rows: int) -> np.ndarray:
    """Per row of the second side, the first side's row at the same frame row (-1: none)."""
    twin = np.full(rows, -1, dtype=np.int64)
    both = (a_of >= 0) & (b_of >= 0)
    twin[b_of[both]] = a_of[both]
    return twin


def _scan(
    side: SideRoutes,
    of: np.ndarray,
    what: str,
    sample_ids: list[str],
    num_experts: int | None,
    tally: RouteTally,
    twin: tuple[SideRoutes, np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Validate a side's rows; the rows filled with one id (a capture bug) counted where they
    are placed (``of``: per frame row, the side's row; the prompt's earlier rows are never
    used), except verl's rows of zeros, its mark of a row not recorded. ``twin``: the side
    validated before it, each row's twin there and that side's fills (a row equal to its twin
    has its verdict: only the rows that differ are checked). Returns the rows' fills and,
    with a twin of the same type, the rows equal to their twin (else empty)."""
    dead = np.zeros(len(side.ids), dtype=np.bool_)
    if not len(side.ids) or side.ids.size == 0:
        return dead, np.zeros(0, dtype=np.bool_)
    high = num_experts if num_experts is not None else np.iinfo(np.int32).max
    ids = _flat_rows(side.ids)
    paired, same = _pairing(ids, side, twin, dead)
    args = (ids, *paired, side.layers, side.top_k, high, dead, same)
    found = over_ranges(_kernels().scan_rows, len(ids), *args)
    code, r = next(((c, r) for c, r, _ in found if c != _kernels().OK), (_kernels().OK, -1))
    top = max(t for _, _, t in found)
    if code != _kernels().OK:
        raise _bad_row(side, int(code), int(r), what, sample_ids, num_experts)
    tally.max_id = max(tally.max_id, int(top))
    placed = of[of >= 0]
    filled = placed[dead[placed]]
    if side.zeros_unrecorded and len(filled):
        zero = ~ids[filled].any(axis=1)
        tally.zero_rows += int(zero.sum())
        filled = filled[~zero]
    if len(filled):
        tally.bugs[BUG_FILL] += len(filled)
    return dead, same


def _pairing(
    ids: np.ndarray,
    side: SideRoutes,
    twin: tuple[SideRoutes, np.ndarray, np.ndarray] | None,
    dead: np.ndarray,
) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """``scan_rows``' (twins, words, twin words, twin fills) and its ``same`` (empty: no twin,
    or one of another type, whose rows are not compared byte for byte)."""
    kern = _kernels()
    if twin is None or not len(twin[0].ids) or twin[0].ids.dtype != side.ids.dtype:
        none = (np.empty(0, np.int64), kern.NO_WORDS, kern.NO_WORDS, dead)
        return none, np.zeros(0, dtype=np.bool_)
    words = (kern.row_words(ids), kern.row_words(_flat_rows(twin[0].ids)))
    return (twin[1], *words, twin[2]), np.zeros(len(ids), dtype=np.bool_)


def _bad_row(
    side: SideRoutes, code: int, r: int, what: str, sample_ids: list[str], num_experts: int | None
) -> InputError:
    i = int(np.searchsorted(side.offsets, r, side="right") - 1)
    j = int(side.first[i] + r - side.offsets[i])
    row = side.ids[r]
    at = f"{what}: sample `{sample_ids[i]}`: {side.named}, response index {j}"
    if code == _kernels().BAD_ID:
        high = num_experts if num_experts is not None else np.iinfo(np.int32).max
        found = int(row[(row < -1) | (row >= high)][0])
        expected = f"ids in [0, {num_experts})" if num_experts else "ids >= 0 (or -1)"
        return InputError(
            f"{at}: expected {expected}, found {found}",
            "check --num-experts, and map the right routes column.",
        )
    if code == _kernels().PARTIAL:
        return InputError(
            f"{at}: expected -1 on every slot or on none, found some slots -1, others not",
            "write -1 on every slot of a position whose route was not recorded.",
        )
    s = np.sort(row, axis=1)
    layer = int(np.flatnonzero((s[:, 1:] == s[:, :-1]).any(axis=1))[0])
    return InputError(
        f"{at}, layer {layer}: expected {row.shape[1]} distinct expert ids, found "
        f"{row[layer].tolist()}",
        "the routes column must hold each position's top-k expert ids per layer.",
    )


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


def _validity(valid: np.ndarray) -> pa.Buffer | None:
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))
