"""The signed side of a part of the run: whether its excess is a shift that removes probability
mass (a logit processor, a mask, a truncation on one side) or noise of a larger scale (a code
path, a kernel, a dtype).

The K3 cube holds ``K3 = exp(r) - 1 - r`` only; the sign of ``r`` and the mean ratio are lost
there. This state keeps, per *cell* (turn index, KV position, position in the turn, probability
bin) and per group of sequences, the tokens, those with ``r < 0``, the sum of ``exp(r) - 1``
and the sum of K3 (``SignedParts``), so any part of the run on those dimensions can be weighed
once the localization has named it (``one_signed``, ``rate_ratio``). Its size is fixed (a few
MB), whatever the run's length.

Why the mean ratio: the dumps' tokens are sampled from the rollout side's distribution ``q``,
so when the trainer's ``p`` is a distribution over the same tokens, ``E_q[p/q] = 1`` exactly,
however large the noise between them: ``mean(exp(r) - 1)`` is 0 up to sampling error, and for
noise that error is at most about the K3 the sample holds (``E[exp(r) - 1] = E[r] + E[K3]``: a
finite sample misses the rare large positive ``r`` that balance the others). A mask or a
truncation on one side removes a mass ``b`` of each context: the kept tokens' ``r`` is
``log(1 - b)``, the mean ratio falls by ``b`` while the K3 rises by only about ``b^2 / 2``. A
deficit many times the part's excess K3 is mass removed, not noise; the share of the part's
tokens below zero rises with it (the rollout side higher on every kept token).

Standard errors treat each group of sequences as a cluster: tokens of one context are not
independent, sequences are. A sequence's group is a hash of its id (``GROUPS`` groups), so the
clusters are many and of alike size however the ids are laid out."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import numpy as np

from mismatchctl.stats import per_token
from mismatchctl.stats.diagnose_kernels import signed_cell_sums
from mismatchctl.stats.splits import TURN_INDEX_LABELS
from mismatchctl.stats.whatif import RATIO_LOG_CLAMP

FIELDS = ("turn", "kv_position", "turn_position", "bin")
"""The cell's dimensions: per-token codes (the turn index, the bins of the KV position and of the
position in the turn, the probability bin)."""

TURN_POSITION_EDGES = (0, 8, 16, 64, 256, 1024)
"""The bins of the position in the turn: the cube's (0, 16, 64, 256, 1024) with the first 8
tokens apart (the turn edges' burst)."""

GROUP_BITS = 6
GROUPS = 1 << GROUP_BITS  # the top 6 bits of the hash
"""Clusters of sequences for the standard errors: 63 degrees of freedom."""

MIN_REST = 20
"""Tokens of the rest a probability bin needs for its rates to stand for the part's tokens
there: the part's tokens in a bin with fewer are left out."""

N_SUMS = 4  # per cell: tokens, tokens with r < 0, sum of exp(r) - 1, sum of K3
HASH = 0x9E3779B97F4A7C15  # Fibonacci hashing of the sequence ids into the groups


@dataclass(frozen=True)
class SliceSums:
    """One slice's sums as computed: the rows of the ``(GROUPS x cells, N_SUMS)`` table its
    tokens reach (a slice of a few hundred sequences reaches a few percent of them) and their
    sums. Kept sparse until merged: a slice's dense table (8 MB at the log bins) in every
    worker's slices and merges set much of diagnose's peak memory."""

    shape: tuple[int, ...]  # (GROUPS, *cells, N_SUMS)
    rows: np.ndarray  # int64, ascending
    sums: np.ndarray  # (len(rows), N_SUMS)

    def dense(self) -> np.ndarray:
        """The whole table (its other rows zero)."""
        out = np.zeros(self.shape)
        out.reshape(-1, N_SUMS)[self.rows] = self.sums
        return out

    def added_to(self, table: np.ndarray) -> np.ndarray:
        """``table`` plus these sums, a new array: each of its rows gets one addition, the one
        the dense tables' ``+`` makes (the other rows add zero: the same values)."""
        out = table.copy()
        out.reshape(-1, N_SUMS)[self.rows] += self.sums
        return out


@dataclass
class SignedParts:
    """Each run's sums, shape ``(GROUPS, *cells, N_SUMS)`` (``cells``: the levels of each of
    ``FIELDS``), or one slice's (:class:`SliceSums`) before any merge; merged by addition."""

    runs: dict[str, np.ndarray | SliceSums] = field(default_factory=dict)

    def merge(self, other: SignedParts) -> SignedParts:
        out = dict(self.runs)
        for run, sums in other.runs.items():
            out[run] = _add(out[run], sums) if run in out else sums
        return SignedParts(out)

    def merge_into(self, other: SignedParts) -> SignedParts:
        """:meth:`merge`, adding ``other`` in place into this state's tables where they are
        dense and writable (an engine's running total: no new table per slice; a state read
        from Ray's object store is read-only and is copied). The same additions as ``merge``."""
        out = dict(self.runs)
        for run, sums in other.runs.items():
            table = out.get(run)
            if not isinstance(table, np.ndarray) or not table.flags.writeable:
                out[run] = _add(table, sums) if run in out else sums
            elif isinstance(sums, SliceSums):
                table.reshape(-1, N_SUMS)[sums.rows] += sums.sums
            else:
                table += sums
        return SignedParts(out)

    def dense(self, run: str) -> np.ndarray:
        """The run's whole table."""
        sums = self.runs[run]
        return sums.dense() if isinstance(sums, SliceSums) else sums

    def total(self) -> np.ndarray | None:
        """Every run's sums added (the runs' groups are clusters alike), None without any."""
        found = [self.dense(run) for run in self.runs]
        return None if not found else sum(found[1:], found[0].copy())


def _add(a: np.ndarray | SliceSums, b: np.ndarray | SliceSums) -> np.ndarray:
    """``a + b`` as a table, as the dense tables' elementwise ``+`` adds them (to the bit)."""
    if isinstance(a, SliceSums) and isinstance(b, SliceSums):
        out = a.dense()  # a new table: ``b`` added in place
        out.reshape(-1, N_SUMS)[b.rows] += b.sums
        return out
    if isinstance(b, SliceSums):
        return b.added_to(a)
    return a.added_to(b) if isinstance(a, SliceSums) else a + b


def signed_parts(
    run: str,
    r: np.ndarray,
    k3: np.ndarray,
    seq: np.ndarray,
    turn: np.ndarray,
    kv: np.ndarray,
    bins: np.ndarray,
    kv_edges: tuple[int, ...],
    n_bins: int,
    ratio: np.ndarray | None = None,
) -> SignedParts:
    """The sums of one chunk of tokens of run ``run`` (whole sequences, in order): each token's
    cell on ``FIELDS`` is its turn index (0, 1, 2, 3+), the bin of its KV position ``kv`` among
    ``kv_edges``, the bin of its index in its turn run among ``TURN_POSITION_EDGES``, its
    probability bin (below ``n_bins``). Tokens whose ``r`` is not finite are left out.
    ``ratio``: each token's ``expm1(clip(r))`` (``clamped_ratio``) when the caller has it. One
    compiled walk (``stats/diagnose_kernels.signed_cell_sums``); the tests hold the numpy
    computation it replaces."""
    if len(turn) and int(turn.min()) < 0:
        raise ValueError(f"turn indices must be >= 0 (found {int(turn.min())})")
    levels = (len(TURN_INDEX_LABELS), len(kv_edges), len(TURN_POSITION_EDGES), n_bins)
    shape = (GROUPS, *levels)
    sums = _zeroed(math.prod(shape))
    reached = np.empty(min(len(r), len(sums)), np.int64)
    q = clamped_ratio(r) if ratio is None else ratio
    try:
        m = signed_cell_sums(
            np.asarray(seq, np.int64),
            turn,
            np.asarray(kv, np.int64),
            bins,
            r,
            q,
            k3,
            np.asarray(kv_edges[1:], np.int64),
            np.asarray(TURN_POSITION_EDGES[1:], np.int64),
            np.asarray(levels, np.int64),
            np.uint64(HASH),
            np.uint64(64 - GROUP_BITS),
            sums,
            reached,
        )
    except BaseException:
        _TABLE.__dict__.pop("sums", None)  # rows it reached are not listed: made anew next time
        raise
    rows = np.sort(reached[:m])  # listed as the walk reached them: no pass over the table
    found = sums[rows]
    sums[rows] = 0.0  # the table zeroed again for the thread's next slice
    return SignedParts({run: SliceSums((*shape, N_SUMS), rows, found)})


def clamped_ratio(r: np.ndarray) -> np.ndarray:
    """Each token's ``rho - 1`` from ``r`` clamped to +-``RATIO_LOG_CLAMP`` (``per_token.expm1``:
    the K3's own ``expm1``). The signed parts' and the offset's (``stats/offset.py``) ``q``."""
    return per_token.expm1(np.clip(r, -RATIO_LOG_CLAMP, RATIO_LOG_CLAMP))


_TABLE = threading.local()  # each thread's zeroed table of the walk's sums


def _zeroed(n_rows: int) -> np.ndarray:
    """A zeroed table of ``n_rows`` sums, the thread's own, kept between slices: zeroing all
    276,480 rows of it per slice (8.8 MB) cost more than the walk of a step's 20k tokens,
    which reaches a few thousand; they are zeroed again after it."""
    sums = getattr(_TABLE, "sums", None)
    if sums is None or len(sums) != n_rows:
        sums = _TABLE.sums = np.zeros((n_rows, N_SUMS))
    return sums


@dataclass(frozen=True)
class OneSigned:
    """A part against the rest at the same probability bins: its tokens; the mean of
    ``exp(r) - 1`` over its tokens less the rest's (``deficit``, negative when mass is
    removed) with its z (clustered); its K3 per token above the rest's (``excess_k3``); the
    share of its tokens below zero, the rest's at the same bins, and the difference's z."""

    tokens: int
    deficit: float
    deficit_z: float
    excess_k3: float
    below: float
    below_expected: float
    below_z: float

    @property
    def deficit_per_k3(self) -> float:
        """The mass the part's mean ratio lacks per unit of its excess K3 (inf: no excess)."""
        if self.excess_k3 <= 0:
            return math.inf
        return -self.deficit / self.excess_k3


def one_signed(sums: np.ndarray, part: np.ndarray) -> OneSigned | None:
    """The part (``part``: a mask over the cells, ``sums.shape[1:-1]``) against the rest, per
    probability bin (the cells' last dimension); None when no bin holds both the part's tokens
    and ``MIN_REST`` of the rest's."""
    p, rest = _by_group_bin(sums, part), _by_group_bin(sums, ~part)  # (GROUPS, bins, N_SUMS)
    n_p, n_r = p[..., 0].sum(0), rest[..., 0].sum(0)
    used = (n_p > 0) & (n_r >= MIN_REST)
    tokens = float(n_p[used].sum())
    if tokens == 0:
        return None
    w = np.where(used, n_p, 0.0) / tokens  # the part's token mix
    found = {}
    for i in (1, 2, 3):  # below zero, exp(r) - 1, K3: the part's mean less the rest's, per bin
        m_p = np.divide(p[..., i].sum(0), n_p, out=np.zeros_like(n_p), where=used)
        m_r = np.divide(rest[..., i].sum(0), n_r, out=np.zeros_like(n_r), where=used)
        found[i] = (float(w @ m_p), float(w @ m_r), _clustered_z(p, rest, i, w, used, m_p, m_r))
    return OneSigned(
        int(tokens),
        found[2][0] - found[2][1],
        found[2][2],
        found[3][0] - found[3][1],
        found[1][0],
        found[1][1],
        found[1][2],
    )


def _by_group_bin(sums: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The sums of the cells in ``mask`` per group and probability bin."""
    inner = sums * mask[None, ..., None]
    return inner.reshape(sums.shape[0], -1, sums.shape[-2], sums.shape[-1]).sum(axis=1)


def _clustered_z(
    p: np.ndarray,
    rest: np.ndarray,
    i: int,
    w: np.ndarray,
    used: np.ndarray,
    m_p: np.ndarray,
    m_r: np.ndarray,
) -> float:
    """The z of ``sum_b w_b (m_p[b] - m_r[b])``, each group a cluster: the difference is a sum
    over tokens (a part token's value over the part's tokens of its bin times ``w_b``, less a
    rest token's over the rest's), so its variance is ``k / (k - 1)`` times the sum over
    groups of their centered contributions squared."""
    n_p, n_r = p[..., 0].sum(0), rest[..., 0].sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        a = np.where(used, w / n_p, 0.0) * (p[..., i] - p[..., 0] * m_p)
        b = np.where(used, w / n_r, 0.0) * (rest[..., i] - rest[..., 0] * m_r)
    per_group = (a - b).sum(axis=1)
    k = int(np.count_nonzero((p[..., 0] + rest[..., 0]).sum(axis=1)))
    diff = float(w @ (m_p - m_r))
    var = k / (k - 1) * float(per_group @ per_group) if k > 1 else 0.0
    if var <= 0:
        return 0.0 if diff == 0 else math.copysign(math.inf, diff)
    return diff / math.sqrt(var)


@dataclass(frozen=True)
class RateRatio:
    """A part's K3 rate against a reference's at the same probability bins: ``ratio`` (observed
    over what the reference's rates predict), its 95% interval (each group of sequences a
    cluster), the part's tokens."""

    ratio: float
    ci: tuple[float, float]
    tokens: int


def rate_ratio(sums: np.ndarray, part: np.ndarray, reference: np.ndarray) -> RateRatio | None:
    """The part's K3 over what the reference's rate in each probability bin predicts for its
    tokens (masks over the cells); None when no bin holds both (``MIN_REST`` of the
    reference's) or either holds no K3. The interval is the delta method's on the log ratio,
    each group's observed and predicted sums a cluster (the reference's rates taken as
    known)."""
    p, ref = _by_group_bin(sums, part), _by_group_bin(sums, reference)
    n_ref = ref[..., 0].sum(0)
    rate = np.divide(ref[..., 3].sum(0), n_ref, out=np.zeros_like(n_ref), where=n_ref >= MIN_REST)
    used = n_ref >= MIN_REST
    observed = (p[..., 3] * used).sum(axis=1)  # per group
    predicted = (p[..., 0] * rate).sum(axis=1)
    total_o, total_e = float(observed.sum()), float(predicted.sum())
    if total_e <= 0 or total_o <= 0:
        return None
    ratio = total_o / total_e
    resid = observed - ratio * predicted
    k = int(np.count_nonzero(p[..., 0].sum(axis=1)))
    se = math.sqrt(k / (k - 1) * float(resid @ resid)) / total_o if k > 1 else math.inf
    ci = (ratio * math.exp(-1.96 * se), ratio * math.exp(1.96 * se))
    return RateRatio(ratio, ci, int((p[..., 0] * used).sum()))
