"""From a reader's :class:`RaggedBatch` to canonical token and sequence rows.

Everything every format shares lives here: the length check between the two sides and the mask,
finite / <= 1e-4 logprobs (and finite, non-negative entropies) among model tokens, what a missing
or partial mask would let in (``unmasked``: trailing padding, tool responses), each sequence's
content key for the duplicate count (``duplicates``), turn derivation from mask runs, keeping only
model tokens, the per-sequence counts of prompt, tool and padding positions, the per-sequence
mean entropy over the model tokens, and (``keep_masked``) the token ids of the masked positions
between a sequence's first and last model token (its tool responses: the ``masked/`` parts).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.columns import arrow_as, arrow_of, strings_of
from mismatchctl.display import has_control, shown
from mismatchctl.errors import InputError
from mismatchctl.ingest import batch_roles
from mismatchctl.ingest.batch import RaggedBatch, offsets_from_lengths, sequence_index
from mismatchctl.ingest.duplicates import sequence_keys
from mismatchctl.ingest.routing_batch import batch_routing
from mismatchctl.ingest.routing_rows import RouteOptions, RouteTally
from mismatchctl.ingest.unmasked import check_padding, check_tool_fills

MAX_LISTED_DROPS = 50  # how many dropped sample ids are kept by name in the provenance
MAX_COUNTED_VALUES = 1000  # distinct values of one attribute counted per source (runs show)


@dataclass
class Tally:
    """What one source contributed, and what was excluded and why."""

    sequences: int = 0
    empty_sequences: int = 0
    model_tokens: int = 0
    prompt_tokens: int = 0
    tool_tokens: int = 0
    pad_tokens: int = 0
    padding_kept: int = 0  # trailing padding kept as model tokens (--allow-padding)
    duplicate_sequences: int = 0  # exact repeats of an earlier sequence of the same step
    steps: set[int] = field(default_factory=set)
    gpus: set[str] = field(default_factory=set)
    dropped: Counter[str] = field(default_factory=Counter)  # reason -> sequences dropped
    dropped_ids: list[str] = field(default_factory=list)
    # per attribute, its values' sequence counts (at most MAX_COUNTED_VALUES values; the
    # attributes in ``uncounted`` had more)
    attributes: dict[str, Counter[str | None]] = field(default_factory=dict)
    uncounted: set[str] = field(default_factory=set)
    prompt_lengths: int = 0  # sequences whose prompt length is known

    def add(self, other: Tally) -> None:
        for name in ("sequences", "empty_sequences", "model_tokens", "prompt_tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.tool_tokens += other.tool_tokens
        self.pad_tokens += other.pad_tokens
        self.padding_kept += other.padding_kept
        self.duplicate_sequences += other.duplicate_sequences
        self.steps |= other.steps
        self.gpus |= other.gpus
        self.dropped.update(other.dropped)
        room = MAX_LISTED_DROPS - len(self.dropped_ids)
        self.dropped_ids.extend(other.dropped_ids[: max(room, 0)])
        self.prompt_lengths += other.prompt_lengths
        self.uncounted |= other.uncounted
        for name, counts in other.attributes.items():
            mine = self.attributes.setdefault(name, Counter())
            for value, count in counts.items():
                if value in mine or len(mine) < MAX_COUNTED_VALUES:
                    mine[value] += count
                else:
                    self.uncounted.add(name)

    def attribute_summary(self, top: int = 10) -> dict[str, dict]:
        """Per attribute: how many distinct values (``more``: beyond those counted) and the most
        frequent values with their sequence counts: what ``runs show`` lists."""
        return {
            name: {
                "distinct": len(counts),
                "more": name in self.uncounted,
                "values": [[v, n] for v, n in sorted(counts.items(), key=_by_count)[:top]],
            }
            for name, counts in self.attributes.items()
        }

    @property
    def dropped_sequences(self) -> int:
        return sum(self.dropped.values())


def _by_count(item: tuple[str | None, int]) -> tuple:
    value, count = item
    return (-count, value is None, value or "")


@dataclass
class Context:
    source: str  # the file as messages name it (display.file_label)
    gpu_tag: str | None
    skip_bad: bool
    seq_base: int  # first free sequence id of the run
    allow_padding: bool = False  # keep trailing padding of a dump without mask as tokens
    keys: list[np.ndarray] | None = None  # collects each kept sequence's content key
    attributes: list[str] = field(default_factory=list)  # the source's attribute columns
    # role -> the attribute column of batch_id / batch_size (``ingest.batch_roles``)
    batch_columns: dict[str, str] = field(default_factory=dict)
    # routed experts (MoE): how to read and pair them, what they held, the last batch's
    # routing rows (row for row with its token rows; None without routes on both sides)
    routes: RouteOptions = field(default_factory=RouteOptions)
    route_tally: RouteTally = field(default_factory=RouteTally)
    route_notes: set[str] = field(default_factory=set)
    routing_rows: pa.Table | None = None
    # the token ids of the tool responses (masked positions between model tokens) of the last
    # batch, when kept (``--keep-masked``) and the dump has token ids; else None
    keep_masked: bool = False
    masked_rows: pa.Table | None = None


def canonicalize(batch: RaggedBatch, ctx: Context) -> tuple[pa.Table, pa.Table, Tally]:
    """Validate a batch and turn it into (token rows, sequence rows, tally)."""
    tally = Tally()
    # the reader's own findings name a sample better than the lengths they leave unequal
    batch = _drop(batch, {**_misaligned(batch, ctx), **batch.problems}, ctx, tally)
    batch = _drop(batch, _bad_values(batch, ctx), ctx, tally)
    batch = _drop(batch, _bad_versions(batch), ctx, tally)
    batch = _drop(batch, _bad_names(batch), ctx, tally)
    batch = _drop(batch, _bad_prompts(batch), ctx, tally)
    batch = _drop(batch, _bad_batches(batch, ctx), ctx, tally)
    if batch.mask is None:
        tally.padding_kept = check_padding(batch, ctx.source, ctx.allow_padding).positions
    elif batch.partial_mask is not None:
        check_tool_fills(batch, ctx.source, batch.partial_mask)
    if ctx.keys is not None:
        ctx.keys.append(sequence_keys(batch))
    model = batch.mask if batch.mask is not None else np.ones(len(batch.rollout), dtype=bool)
    turn = batch.turn if batch.turn is not None else derive_turns(model, batch.offsets)
    where = np.flatnonzero(model)
    counts = _position_counts(where, batch.offsets)
    for name, outside in (("prompt", batch.prompt_outside), ("pad", batch.pad_outside)):
        if outside is not None:
            counts[name] = counts[name] + outside
    seq_ids = ctx.seq_base + np.arange(batch.n, dtype=np.int64)
    gpus = _gpus(batch, ctx)
    tokens = _token_table(batch, where, counts["model"], turn, seq_ids, gpus)
    seqs = _sequence_table(batch, seq_ids, gpus, counts, turn, model, ctx)
    _tally(tally, batch, counts, gpus, ctx.attributes)
    ctx.masked_rows = _masked_table(batch, model, counts, seq_ids) if ctx.keep_masked else None
    ctx.routing_rows = None
    if batch.routes:
        ctx.routing_rows, routes, note = batch_routing(
            batch, where, tokens, model, ctx.source, ctx.routes
        )
        ctx.route_tally.add(routes, ctx.source)
        if note:
            ctx.route_notes.add(note)
    return tokens, seqs, tally


def derive_turns(model: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Turn index of every position: a turn is a maximal run of model tokens within a sequence.

    Mask ``1110011100`` gives turns ``0,0,0,1,1,1`` on its model tokens. Values at masked positions
    are meaningless (they are never stored).
    """
    n = len(model)
    prev = np.zeros_like(model)
    prev[1:] = model[:-1]
    starts_of_seq = offsets[:-1][np.diff(offsets) > 0]
    prev[starts_of_seq] = False
    run_starts = np.flatnonzero(model & ~prev)
    turns = np.zeros(n, dtype=np.int32)
    if len(run_starts) == 0:
        return turns
    # each run's index within its sequence, spread forward to the next run's start
    run_seq = np.searchsorted(offsets, run_starts, side="right") - 1
    idx = np.arange(len(run_starts))
    first = np.r_[True, run_seq[1:] != run_seq[:-1]]
    run_turn = idx - np.maximum.accumulate(np.where(first, idx, 0))
    turns[run_starts[0] :] = np.repeat(run_turn.astype(np.int32), np.diff(run_starts, append=n))
    return turns


# A problem with one sequence: (reason counted in the tally, detail for the message).
Problem = tuple[str, str]


def _misaligned(batch: RaggedBatch, ctx: Context) -> dict[int, Problem]:
    lengths = batch.lengths()
    bad: dict[int, Problem] = {}
    for role, other in batch.role_lengths.items():
        for i in np.flatnonzero(other != lengths):
            bad.setdefault(
                int(i),
                (
                    f"{role} length differs from {S.ROLE_ROLLOUT}",
                    f"{S.ROLE_ROLLOUT} has {lengths[i]} values, {role} has {other[i]}",
                ),
            )
    return bad


def _all_within(values: np.ndarray, lo: float, hi: float, lo_closed: bool = False) -> bool:
    """Whether every value (at any position) is finite and within the bounds: two reductions,
    the fast path of the checks below (NaN propagates through min and max: never within)."""
    if len(values) == 0:
        return True
    low, high = values.min(), values.max()
    above = low >= lo if lo_closed else low > lo
    return bool(above and high <= hi and np.isfinite(low) and np.isfinite(high))


def _bad_values(batch: RaggedBatch, ctx: Context) -> dict[int, Problem]:
    """Values at model tokens: logprobs finite and <= LOGPROB_MAX, entropies finite and >=
    ENTROPY_MIN (masked positions may hold anything). The first problem of a sequence is named."""
    model = batch.mask if batch.mask is not None else np.ones(len(batch.rollout), dtype=bool)
    bad: dict[int, Problem] = {}
    high, low = f"> {S.LOGPROB_MAX:g}", f"< {S.ENTROPY_MIN:g}"
    for role, values in ((S.ROLE_ROLLOUT, batch.rollout), (S.ROLE_TRAINER, batch.trainer)):
        if _all_within(values, -np.inf, S.LOGPROB_MAX):
            continue
        with np.errstate(invalid="ignore"):
            wrong = model & ~(np.isfinite(values) & (values <= S.LOGPROB_MAX))
        _flag_tokens(bad, batch, wrong, values, f"{role} logprob", high, f"<= {S.LOGPROB_MAX:g}")
    if batch.entropy is not None:
        values = batch.entropy
        if not _all_within(values, S.ENTROPY_MIN, np.inf, lo_closed=True):
            with np.errstate(invalid="ignore"):
                wrong = model & ~(np.isfinite(values) & (values >= S.ENTROPY_MIN))
            _flag_tokens(bad, batch, wrong, values, S.ROLE_ENTROPY, low, f">= {S.ENTROPY_MIN:g}")
    elif batch.entropies is not None:
        values = batch.entropies
        has_model = np.bincount(sequence_index(batch.offsets)[model], minlength=batch.n) > 0
        with np.errstate(invalid="ignore"):
            wrong = (
                has_model
                & _entropies_given(batch)
                & ~(np.isfinite(values) & (values >= S.ENTROPY_MIN))
            )
        for i in np.flatnonzero(wrong):
            if int(i) not in bad:
                bad[int(i)] = _problem(
                    S.ROLE_ENTROPY, float(values[i]), low, "of the response",
                    f">= {S.ENTROPY_MIN:g}",
                )  # fmt: skip
    return bad


def _flag_tokens(
    bad: dict[int, Problem],
    batch: RaggedBatch,
    wrong: np.ndarray,
    values: np.ndarray,
    name: str,
    beyond: str,
    expected: str,
) -> None:
    """Add the first wrong model token of each sequence not already flagged."""
    if not wrong.any():
        return
    where = np.flatnonzero(wrong)
    seqs = sequence_index(batch.offsets)[where]
    for pos, i in zip(where, seqs, strict=True):
        if int(i) not in bad:
            at = f"at position {int(pos - batch.offsets[i])} of a model token"
            bad[int(i)] = _problem(name, float(values[pos]), beyond, at, expected)


def _problem(name: str, value: float, beyond: str, where: str, expected: str) -> Problem:
    """A bad value's (kind, message): ``beyond`` is the kind of a finite value out of range."""
    kind = "not finite" if not np.isfinite(value) else beyond
    return f"{name} {kind}", f"{name} {value!r} {where} (expected a finite value {expected})"


def _entropies_given(batch: RaggedBatch) -> np.ndarray:
    """Where the dump holds a per-sequence entropy (a NaN it wrote counts; a null does not)."""
    assert batch.entropies is not None
    if batch.entropies_given is not None:
        return batch.entropies_given
    return ~np.isnan(batch.entropies)


def _bad_versions(batch: RaggedBatch) -> dict[int, Problem]:
    """A weight version is an integer: 1.5, inf or 1e30 would be truncated into a wrong lag."""
    v = batch.weight_versions
    if v is None:
        return {}
    with np.errstate(invalid="ignore"):
        wrong = ~np.isnan(v) & (~np.isfinite(v) | (v != np.round(v)) | (np.abs(v) > 2**53))
    return {
        int(i): (
            "weight_version not an integer",
            f"weight_version {float(v[i])!r} (expected an integer)",
        )
        for i in np.flatnonzero(wrong)
    }


def _bad_names(batch: RaggedBatch) -> dict[int, Problem]:
    """Sample ids and gpu names are shown in terminals: control characters are refused."""
    bad: dict[int, Problem] = {}
    for role, values in ((S.ROLE_SAMPLE_ID, batch.sample_ids), (S.ROLE_GPU, batch.gpus or [])):
        for i, value in enumerate(values):
            if value is not None and i not in bad and has_control(value):
                bad[i] = (
                    f"{role} with control characters",
                    f"{role} {shown(value, 60)} holds control characters (expected printable text)",
                )
    return bad


def _bad_prompts(batch: RaggedBatch) -> dict[int, Problem]:
    """A prompt length is a count (-1 stands for unknown)."""
    if batch.prompt_lengths is None:
        return {}
    return {
        int(i): (
            "prompt_length negative",
            f"prompt_length {int(batch.prompt_lengths[i])} (expected a count >= 0)",
        )
        for i in np.flatnonzero(batch.prompt_lengths < -1)
    }


def _bad_batches(batch: RaggedBatch, ctx: Context) -> dict[int, Problem]:
    """A batch id or size that is no integer of its range (ingest.batch_roles)."""
    bad: dict[int, Problem] = {}
    for role, column in ctx.batch_columns.items():
        for i, problem in batch_roles.parse(batch.attrs[column], role)[1].items():
            bad.setdefault(i, problem)
    return bad


def _batch_columns(batch: RaggedBatch, ctx: Context) -> dict[str, pa.Array]:
    """The sequence rows' ``batch_id`` and ``batch_size`` (null where the dump has none)."""
    out = {}
    for role, name in ((S.ROLE_BATCH_ID, S.BATCH_ID), (S.ROLE_BATCH_SIZE, S.BATCH_SIZE)):
        column = ctx.batch_columns.get(role)
        if column is None:
            out[name] = pa.nulls(batch.n, pa.int64())
            continue
        values = batch_roles.parse(batch.attrs[column], role)[0]
        out[name] = arrow_as(values, pa.int64(), missing=values < 0)
    return out


def _drop(batch: RaggedBatch, bad: dict[int, Problem], ctx: Context, tally: Tally) -> RaggedBatch:
    if not bad:
        return batch
    first = min(bad)
    if not ctx.skip_bad:
        raise InputError(
            f"{ctx.source}: sample `{batch.sample_ids[first]}` ({batch.location(first)}): "
            f"{bad[first][1]}; {len(bad)} bad sample(s) in this batch",
            "fix the dump, or pass --skip-bad to drop bad samples (they are counted and listed).",
        )
    for i in sorted(bad):
        reason, detail = bad[i]
        tally.dropped[reason] += 1
        if len(tally.dropped_ids) < MAX_LISTED_DROPS:
            tally.dropped_ids.append(f"{batch.sample_ids[i]}: {detail}")
    keep = np.ones(batch.n, dtype=bool)
    keep[list(bad)] = False
    return _keep(batch, keep)


def _keep(batch: RaggedBatch, keep: np.ndarray) -> RaggedBatch:
    """The batch without the sequences where ``keep`` is False (every role re-aligned).

    Each per-token role is cut with its own lengths: a dropped sequence may be dropped precisely
    because its roles have different lengths.
    """
    lengths = batch.lengths()
    role_of = {
        "trainer": S.ROLE_TRAINER,
        "mask": S.ROLE_MASK,
        "token_ids": S.ROLE_TOKENS,
        "entropy": S.ROLE_ENTROPY,
    }

    def flat(name: str) -> np.ndarray | None:
        a = getattr(batch, name)
        if a is None:
            return None
        own = batch.role_lengths.get(role_of.get(name, ""), lengths)
        return a[np.repeat(keep, own)]

    def per_seq(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[keep]

    idx = np.flatnonzero(keep)
    return RaggedBatch(
        steps=batch.steps[keep],
        sample_ids=[batch.sample_ids[i] for i in idx],
        offsets=offsets_from_lengths(lengths[keep]),
        rollout=batch.rollout[np.repeat(keep, lengths)],
        trainer=flat("trainer"),  # type: ignore[arg-type]
        mask=flat("mask"),
        token_ids=flat("token_ids"),
        turn=flat("turn"),
        position=flat("position"),
        gpus=None if batch.gpus is None else [batch.gpus[i] for i in idx],
        rewards=per_seq(batch.rewards),
        entropy=flat("entropy"),
        entropies=per_seq(batch.entropies),
        entropies_given=per_seq(batch.entropies_given),
        weight_versions=per_seq(batch.weight_versions),
        prompt_outside=per_seq(batch.prompt_outside),
        pad_outside=per_seq(batch.pad_outside),
        prompt_lengths=per_seq(batch.prompt_lengths),
        **_kept_prompt_ids(batch, keep),
        attrs={name: [values[i] for i in idx] for name, values in batch.attrs.items()},
        locations=[batch.locations[i] for i in idx] if batch.locations else [],
        role_lengths={},
        partial_mask=batch.partial_mask,
        routes={role: column.keep(keep) for role, column in batch.routes.items()},
    )


def _kept_prompt_ids(batch: RaggedBatch, keep: np.ndarray) -> dict[str, np.ndarray | None]:
    if batch.prompt_ids is None or batch.prompt_id_offsets is None:
        return {"prompt_ids": None, "prompt_id_offsets": None}
    lengths = np.diff(batch.prompt_id_offsets)
    return {
        "prompt_ids": batch.prompt_ids[np.repeat(keep, lengths)],
        "prompt_id_offsets": offsets_from_lengths(lengths[keep]),
    }


def _position_counts(where: np.ndarray, offsets: np.ndarray) -> dict:
    """Per sequence: model, prompt, tool and padding positions, and its first and last model
    position in its arrays (``0`` and ``-1`` when it has none; ``prompt`` may later add the
    prompt the arrays leave out, ``first`` stays); ``where``: the model positions, ascending."""
    lengths = np.diff(offsets)
    bounds = np.searchsorted(where, offsets)  # each sequence's model positions: where[b0:b1]
    t = np.diff(bounds)
    empty = t == 0
    lo = np.minimum(bounds[:-1], max(len(where) - 1, 0))
    hi = np.maximum(bounds[1:] - 1, 0)
    start = offsets[:-1]
    first = where[lo] - start if len(where) else np.zeros_like(t)
    last = np.where(empty, -1, (where[hi] - start) if len(where) else 0)
    prompt = np.where(empty, 0, first)
    pad = np.where(empty, lengths, lengths - 1 - last)
    tool = lengths - t - prompt - pad
    return {"model": t, "prompt": prompt, "pad": pad, "tool": tool, "first": prompt, "last": last}


def _gpus(batch: RaggedBatch, ctx: Context) -> list[str | None]:
    """Per sequence: the dump's own gpu value wins over the run's ``gpu`` tag."""
    if batch.gpus is None:
        return [ctx.gpu_tag] * batch.n
    return [g if g not in (None, "") else ctx.gpu_tag for g in batch.gpus]


def _token_table(batch, where, model_tokens, turn, seq_ids, gpus) -> pa.Table:
    """One row per model position (``where``); ``model_tokens``: their count per sequence."""
    owner = np.repeat(np.arange(batch.n, dtype=np.int32), model_tokens)
    if batch.position is not None:
        position = batch.position[where]
    else:
        position = (where - np.repeat(batch.offsets[:-1], model_tokens)).astype(np.int32)
    token_ids = None if batch.token_ids is None else arrow_as(batch.token_ids[where], pa.int64())
    owner_arr = arrow_of(owner)
    gpu_names, gpu_of = np.unique([g or "" for g in gpus], return_inverse=True)
    no_gpu = np.array([g is None for g in gpus], dtype=bool)
    gpu_idx = np.repeat(gpu_of.astype(np.int32), model_tokens)
    cols = {
        S.STEP: arrow_as(np.repeat(batch.steps, model_tokens), pa.int64()),
        S.SEQ: arrow_as(np.repeat(seq_ids, model_tokens), pa.int64()),
        S.SAMPLE_ID: pa.DictionaryArray.from_arrays(owner_arr, strings_of(batch.sample_ids)),
        S.TURN: arrow_as(turn[where], pa.int32()),
        S.POSITION: arrow_as(position, pa.int32()),
        S.TOKEN_ID: token_ids if token_ids is not None else pa.nulls(len(where), pa.int64()),
        S.ROLLOUT: arrow_as(batch.rollout[where], pa.float64()),
        S.TRAINER: arrow_as(batch.trainer[where], pa.float64()),
        S.GPU: pa.DictionaryArray.from_arrays(  # a small dictionary: the distinct gpus
            arrow_as(
                gpu_idx, pa.int32(), np.repeat(no_gpu, model_tokens) if no_gpu.any() else None
            ),
            strings_of(gpu_names.tolist()),
        ),
        S.TOKEN_ENTROPY: (
            pa.nulls(len(where), pa.float64())
            if batch.entropy is None
            else arrow_as(batch.entropy[where], pa.float64())
        ),
    }
    return pa.table(cols, schema=S.TOKEN_ROWS_SCHEMA)


def _masked_table(batch, model, counts, seq_ids) -> pa.Table | None:
    """One row per masked position before a sequence's last model token, with its token id:
    its tool responses (the positions ``tool_tokens`` counts) and its prompt (the masked
    positions before the first model token, and the prompt the arrays leave out when a
    prompt-ids list gives it, at the positions before the arrays' first); None when the dump has
    no token ids or no mask. ``show`` writes the tool responses, ``bisect`` re-scores the whole
    sequence."""
    if batch.token_ids is None or batch.mask is None or len(batch.token_ids) != len(model):
        return None
    owner = sequence_index(batch.offsets)
    rel = np.arange(len(model), dtype=np.int64) - batch.offsets[:-1][owner]
    where = np.flatnonzero(~model & (rel < counts["last"][owner]))
    position = batch.position[where] if batch.position is not None else rel[where]
    who, ids = owner[where], batch.token_ids[where]
    outside = _outside_prompt(batch)
    if outside is not None:
        both = zip(outside, (who, position, ids), strict=True)
        who, position, ids = (np.concatenate([a, b]) for a, b in both)
        order = np.lexsort((position, who))  # in seq then position order, as readers expect
        who, position, ids = who[order], position[order], ids[order]
    if not len(who):
        return None
    return pa.table(
        {
            S.STEP: arrow_as(batch.steps[who], pa.int64()),
            S.SEQ: arrow_as(seq_ids[who], pa.int64()),
            S.POSITION: arrow_as(position, pa.int32()),
            S.TOKEN_ID: arrow_as(ids, pa.int64()),
        },
        schema=S.MASKED_SCHEMA,
    )


def _outside_prompt(batch: RaggedBatch) -> tuple[np.ndarray, ...] | None:
    """(sequence, position, token id) of the prompt ids the arrays leave out: the ``L`` ids of a
    prompt list sit at the ``L`` positions before the arrays' first."""
    if batch.prompt_ids is None or batch.prompt_id_offsets is None or not len(batch.prompt_ids):
        return None
    lengths = np.diff(batch.prompt_id_offsets)
    who = np.repeat(np.arange(batch.n, dtype=np.int64), lengths)
    first = np.zeros(batch.n, dtype=np.int64)
    if batch.position is not None:
        has = np.diff(batch.offsets) > 0
        first[has] = batch.position[batch.offsets[:-1][has]]
    k = np.arange(len(who), dtype=np.int64) - batch.prompt_id_offsets[:-1][who]
    position = first[who] - lengths[who] + k
    return who, position, batch.prompt_ids


def _sequence_table(batch, seq_ids, gpus, counts, turn, model, ctx: Context) -> pa.Table:
    n, attributes = batch.n, ctx.attributes
    turns = np.zeros(n, dtype=np.int32)
    has = np.flatnonzero(counts["model"] > 0)
    if batch.turn is None:  # derived turns never decrease: the last model token's turn + 1
        turns[has] = turn[batch.offsets[has] + counts["last"][has]] + 1
    elif len(has):  # turns as given by the dump
        where = np.flatnonzero(model)
        np.maximum.at(turns, sequence_index(batch.offsets)[where], turn[where] + 1)
    versions = batch.weight_versions
    lag = None if versions is None else batch.steps - versions
    cols = {
        S.STEP: arrow_as(batch.steps, pa.int64()),
        S.SEQ: arrow_as(seq_ids, pa.int64()),
        S.SAMPLE_ID: strings_of(batch.sample_ids),
        S.GPU: strings_of(gpus),
        S.MODEL_TOKENS: arrow_as(counts["model"], pa.int64()),
        S.TURNS: arrow_as(turns, pa.int32()),
        S.PROMPT_TOKENS: arrow_as(counts["prompt"], pa.int64()),
        S.TOOL_TOKENS: arrow_as(counts["tool"], pa.int64()),
        S.PAD_TOKENS: arrow_as(counts["pad"], pa.int64()),
        S.REWARD: _nullable_float(batch.rewards, n),
        S.ENTROPY: _nullable_float(_entropy_means(batch, counts["model"], model), n),
        S.WEIGHT_VERSION: _nullable_int(versions, n),
        S.WEIGHT_LAG: _nullable_int(lag, n),
        S.PROMPT_LENGTH: _prompt_lengths(batch.prompt_lengths, n),
        **_batch_columns(batch, ctx),
    }
    for name in attributes:
        cols[S.attribute_column(name)] = strings_of(batch.attrs.get(name, [None] * n))
    return pa.table(cols, schema=S.sequence_schema(attributes))


def _prompt_lengths(a: np.ndarray | None, n: int) -> pa.Array:
    if a is None:
        return pa.nulls(n, pa.int64())
    return arrow_as(np.maximum(a, 0), pa.int64(), missing=a < 0)


def _entropy_means(batch, model_tokens, model) -> np.ndarray | None:
    """Per sequence: mean entropy over its model tokens (NaN = null when it has none), or the
    dump's own per-response mean where it gives one."""
    has_model = model_tokens > 0
    if batch.entropy is not None:
        where = np.flatnonzero(model)
        owner = sequence_index(batch.offsets)[where]
        sums = np.bincount(owner, weights=batch.entropy[where], minlength=batch.n)
        return np.where(has_model, sums / np.maximum(model_tokens, 1), np.nan)
    if batch.entropies is not None:
        return np.where(has_model & _entropies_given(batch), batch.entropies, np.nan)
    return None


def _nullable_float(a: np.ndarray | None, n: int) -> pa.Array:
    if a is None:
        return pa.nulls(n, pa.float64())
    return arrow_as(a, pa.float64(), missing=np.isnan(a))


def _nullable_int(a: np.ndarray | None, n: int) -> pa.Array:
    if a is None:
        return pa.nulls(n, pa.int64())
    missing = np.isnan(a)
    return arrow_as(np.where(missing, 0, a).astype(np.int64), pa.int64(), missing=missing)


def _tally(
    tally: Tally, batch: RaggedBatch, counts: dict, gpus: list[str | None], attributes: list[str]
) -> None:
    tally.sequences = batch.n
    tally.empty_sequences = int((counts["model"] == 0).sum())
    tally.model_tokens = int(counts["model"].sum())
    tally.prompt_tokens = int(counts["prompt"].sum())
    tally.tool_tokens = int(counts["tool"].sum())
    tally.pad_tokens = int(counts["pad"].sum())
    tally.steps = {int(s) for s in np.unique(batch.steps)}
    tally.gpus = {g for g in set(gpus) if g is not None}
    if batch.prompt_lengths is not None:
        tally.prompt_lengths = int((batch.prompt_lengths >= 0).sum())
    for name in attributes:
        values = Counter(batch.attrs.get(name, [None] * batch.n))
        if len(values) > MAX_COUNTED_VALUES:
            tally.uncounted.add(name)
            values = Counter(dict(values.most_common(MAX_COUNTED_VALUES)))
        tally.attributes[name] = values
