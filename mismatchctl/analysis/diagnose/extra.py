"""What `diagnose` computes in the report's read of every part, beyond the report itself: lag
co-moments and the turns shifted by a position (alignment, temperature), offset sums (systematic offset, top-p), sentinel counts and
the K3 mass per weight lag (staleness, joined from the store's sequence rows), and the
sequences that end in padding-like runs of 0.0 on both sides, and the signed sums per cell and group
of sequences that weigh a part of the run once it is named (``stats/signed_parts.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.analysis.explain import CUBE_KV_EDGES
from mismatchctl.columns import numpy_of
from mismatchctl.engines import plan as K
from mismatchctl.engines.keys import PartKeys, token_group_codes
from mismatchctl.engines.seqrows import NO_WEIGHT_LAG
from mismatchctl.stats.comoments import (
    lag_k3,
    lag_pairs,
    lag_states,
    merge_pairs,
    shifted_pairs,
)
from mismatchctl.stats.hot_sequences import HotSequenceParts, hot_sequence_state
from mismatchctl.stats.misalign import MisalignState, misalign_state
from mismatchctl.stats.offset import offset_state
from mismatchctl.stats.sentinels import (
    SentinelState,
    TrailingZeroState,
    sentinel_state,
    trailing_zero_state,
)
from mismatchctl.stats.seq_sums import UNKNOWN, SeqSums, seq_sums
from mismatchctl.stats.signed_parts import SignedParts, clamped_ratio, signed_parts
from mismatchctl.stats.step_ids import StepIdState, step_id_state
from mismatchctl.stats.token_shift import TokenShiftState, token_shift_state


@dataclass
class LagSums:
    """Per weight lag (None: unknown): tokens, sequences and the sum of K3, and over the
    sequences (``y_i`` a sequence's K3 sum, ``x_i`` its tokens) ``sum y_i^2``, ``sum x_i^2``
    and ``sum x_i y_i``: the moments of a sequence-clustered variance of each lag's rate."""

    tokens: dict[int | None, float] = field(default_factory=dict)
    sequences: dict[int | None, float] = field(default_factory=dict)
    k3: dict[int | None, float] = field(default_factory=dict)
    yy: dict[int | None, float] = field(default_factory=dict)
    xx: dict[int | None, float] = field(default_factory=dict)
    xy: dict[int | None, float] = field(default_factory=dict)

    def merge(self, other: LagSums) -> LagSums:
        out = LagSums()
        for name in (f.name for f in fields(self)):
            total = dict(getattr(self, name))
            for lag, value in getattr(other, name).items():
                total[lag] = total.get(lag, 0.0) + value
            setattr(out, name, total)
        return out


@dataclass
class DiagnoseState:
    lags: np.ndarray  # (3, 6) pair states, see stats.comoments.LAG_NAMES
    offset: np.ndarray  # stats.offset state
    sentinels: SentinelState
    weight_lags: LagSums
    trailing: TrailingZeroState = field(default_factory=TrailingZeroState)
    lag_k3: np.ndarray = field(default_factory=lambda: np.zeros((3, 2)))  # stats.comoments.lag_k3
    misaligned: MisalignState = field(default_factory=MisalignState)  # stats.misalign
    hot_sequences: HotSequenceParts = field(default_factory=HotSequenceParts)
    token_shift: TokenShiftState = field(default_factory=TokenShiftState)  # stats.token_shift
    sequences: SeqSums = field(default_factory=SeqSums)  # stats.seq_sums: length, batch shape
    signed: SignedParts = field(default_factory=SignedParts)  # stats.signed_parts
    step_ids: StepIdState = field(default_factory=StepIdState)  # stats.step_ids

    def merge(self, other: DiagnoseState, *, in_place: bool = False) -> DiagnoseState:
        """The two states' sums; ``in_place``: this state is an engine's running total, whose
        signed tables ``other``'s are added into (``SignedParts.merge_into``) and whose
        per-sequence rows ``other``'s are listed after (``SeqSums.merge_into``)."""
        signed = self.signed.merge_into if in_place else self.signed.merge
        sequences = self.sequences.merge_into if in_place else self.sequences.merge
        return DiagnoseState(
            merge_pairs(self.lags, other.lags),
            self.offset + other.offset,
            self.sentinels.merge(other.sentinels),
            self.weight_lags.merge(other.weight_lags),
            self.trailing.merge(other.trailing),
            self.lag_k3 + other.lag_k3,
            self.misaligned.merge(other.misaligned),
            self.hot_sequences.merge(other.hot_sequences),
            self.token_shift.merge(other.token_shift),
            sequences(other.sequences),
            signed(other.signed),
            self.step_ids.merge(other.step_ids),
        )


class DiagnoseExtra:
    """Engine extra of `diagnose`; each sequence's weight lag comes with the sequence rows the
    engine reads for the part (the ``batch_size`` key's), not from a second read of the run's
    sequence parts."""

    columns: tuple[str, ...] = (S.TOKEN_ID, S.POSITION)
    # read from the sequence rows (the KV position's: the prompt length)
    keys: tuple[str, ...] = (K.BATCH_SIZE, K.WEIGHT_LAG, K.KV_POSITION)

    def compute(self, table: pa.Table, keys: PartKeys) -> DiagnoseState:
        lr, lt = keys.column(S.ROLLOUT), keys.column(S.TRAINER)
        seq, turn, step = keys.column(S.SEQ), keys.column(S.TURN), keys.column(S.STEP)
        shifted = shifted_pairs(lr, lt, seq, turn)  # once for the lag sums and misaligned turns
        pairs = lag_pairs(lr, lt, seq, turn, shifted.adjacent)
        r, k3 = keys.log_ratio()  # once for every sum of K3 below (numpy's, as each had)
        starts = keys.sequence_starts()  # and each sequence's first row
        ratio = clamped_ratio(r)  # rho - 1 of the clamped r: the offset's and signed parts'
        bins = self._bins(keys)
        ids = _token_ids(table, keys)  # the token-shift sums' and the misaligned turns' pairs
        return DiagnoseState(
            lag_states(pairs),
            offset_state(lr, lt, seq, r, starts, ratio),
            sentinel_state(lr, lt, seq, turn, step, keys.run),
            _lag_sums(keys, k3, seq),
            trailing_zero_state(lr, lt, seq, step, keys.run, starts),
            lag_k3(pairs, k3, shifted),
            misalign_state(lr, lt, seq, turn, step, keys.run, k3=k3, r=r, shifted=shifted, ids=ids),
            hot_sequence_state(
                lr,
                lt,
                seq,
                turn,
                step,
                *bins,
                keys.run,
                k3=k3,
                gpu_codes=_gpus(table, keys),
                r=r,
                starts=starts,
            ),
            token_shift_state(ids, lr, lt, seq, *bins, k3=k3, r=r, starts=starts),
            seq_sums(keys.run, lr, lt, seq, step, _batch_sizes(keys), *bins, (r, k3), starts),
            signed_parts(
                keys.run,
                r,
                k3,
                seq,
                keys.column(S.TURN),
                _kv_positions(keys),
                bins[0],
                CUBE_KV_EDGES,
                bins[1],
                ratio,
            ),
            step_id_state(ids, r, step, starts),
        )

    def merge(self, a: DiagnoseState, b: DiagnoseState) -> DiagnoseState:
        """``a``: the engine's running total (a part's slices, the fold's parts), added into
        where it can be, as the cubes' fold does."""
        return a.merge(b, in_place=True)

    @staticmethod
    def _bins(keys: PartKeys) -> tuple[np.ndarray, int]:
        """Each token's probability bin (the report's) and the number of bins."""
        codes = np.asarray(keys.get(K.BIN).codes, dtype=np.int64)
        return np.broadcast_to(codes, (keys.n,)) if codes.ndim == 0 else codes, len(keys.edges) - 1


def _lag_sums(keys: PartKeys, k3: np.ndarray, seq: np.ndarray) -> LagSums:
    """Per weight lag, the sums of :class:`LagSums`; ``k3``: each token's K3. A sequence's
    lag is looked up once (its tokens share it), not per token."""
    starts = keys.sequence_starts()
    known = keys.sequence_rows().weight_lag
    seq_lag = known[keys.rows()[starts]] if known is not None and len(starts) else seq[:0]
    if not np.any(seq_lag != NO_WEIGHT_LAG):  # no lag known: only the counts (the checks
        # read the known lags' sums alone)
        return LagSums({None: float(len(k3))}, {None: float(len(starts))}, {})
    values, lag_of = np.unique(seq_lag, return_inverse=True)
    lengths = np.diff(np.r_[starts, len(k3)])
    inverse = np.repeat(lag_of, lengths)
    k3_sums = np.bincount(inverse, weights=k3, minlength=len(values))
    tokens = np.bincount(inverse, minlength=len(values))
    sequences = np.bincount(lag_of, minlength=len(values))
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.add.reduceat(k3, starts)
    x = lengths.astype(np.float64)
    label = [None if v == NO_WEIGHT_LAG else int(v) for v in values]

    def per_lag(w: np.ndarray, where: np.ndarray = inverse) -> dict[int | None, float]:
        return dict(zip(label, np.bincount(where, w, len(values)).tolist(), strict=True))

    with np.errstate(over="ignore", invalid="ignore"):
        return LagSums(
            per_lag(tokens.astype(float), np.arange(len(values))),
            per_lag(sequences.astype(float), np.arange(len(values))),
            dict(zip(label, k3_sums.tolist(), strict=True)),
            per_lag(y * y, lag_of),
            per_lag(x * x, lag_of),
            per_lag(x * y, lag_of),
        )


def _kv_positions(keys: PartKeys) -> np.ndarray:
    """Each token's KV position (from the response's start where the dump gave no prompt
    length): the signed sums' KV dimension, binned as the cube's ``CUBE_KV_EDGES``."""
    kv = keys.column(S.POSITION).astype(np.int64)
    kv += keys.prompt_lengths()  # in place: one array of the part's length, not two
    return kv


def _gpus(table: pa.Table, keys: PartKeys) -> tuple[np.ndarray, np.ndarray] | None:
    """Each token's gpu code and the codes' labels, None without a gpu column (the
    hot-sequence state's gpus: a label per sequence, never an object per token)."""
    if S.GPU not in table.column_names:
        return None
    codes, _, labels = token_group_codes(keys, (K.GPU,))  # per turn run, repeated
    return codes, np.asarray(labels[0], object)


def _batch_sizes(keys: PartKeys) -> np.ndarray:
    """Each row's batch size, ``UNKNOWN`` where its source does not say: looked up per turn
    run (the engine's ``by_run``) and repeated: a sequence's batch size is constant along it."""
    runs = keys.by_run
    kc = keys.get(K.BATCH_SIZE) if runs is None else runs.keys.get(K.BATCH_SIZE)
    lut = np.array([UNKNOWN if v is None else int(v) for v in kc.labels], dtype=np.int64)
    return lut[kc.codes] if runs is None else np.repeat(lut[kc.codes], runs.lengths)


def _token_ids(table: pa.Table, keys: PartKeys) -> np.ndarray:
    """Each row's token id, -1 where the dump gave none."""
    if S.TOKEN_ID not in table.column_names:
        return np.full(keys.n, -1, dtype=np.int64)
    ids = numpy_of(table.column(S.TOKEN_ID), fill=-1).astype(np.int64)
    return ids if keys.taken is None else ids[keys.taken]
