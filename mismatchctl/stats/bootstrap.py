"""Bootstrap confidence intervals for comparing two slices, resampling whole sequences.

Per sequence we keep sufficient statistics (token count, sums of K3, |r|, and of both logprobs);
a resample draws sequences with replacement (a fixed seed makes it reproducible) and recomputes the
token-mean metrics and the log-ppl Pearson correlation from weighted sums. The two sides are
resampled independently.

When the two sides hold the same responses (``analysis/pairing/pairing.py``), the paired
bootstrap draws the *pairs* instead: one index per resampled pair picks the sequence on both
sides, from a third generator of the same seed (:func:`paired_generator`).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from mismatchctl.options import DEFAULT_RESAMPLES, DEFAULT_SEED
from mismatchctl.stats import per_token
from mismatchctl.stats import registry as M

FIELDS = ("tokens", "k3", "abs_r", "lr", "lt")


@dataclass
class SeqStats:
    """Per-sequence sums: ``tokens``, ``k3`` (sum of rho - 1 - r), ``abs_r`` (sum of |r|),
    ``lr`` and ``lt`` (sums of the rollout and trainer logprobs)."""

    tokens: np.ndarray
    k3: np.ndarray
    abs_r: np.ndarray
    lr: np.ndarray
    lt: np.ndarray

    @classmethod
    def empty(cls) -> SeqStats:
        return cls(*(np.zeros(0) for _ in FIELDS))

    @classmethod
    def from_tokens(cls, lr: np.ndarray, lt: np.ndarray, seq: np.ndarray) -> SeqStats:
        """From model tokens whose sequences are contiguous runs of ``seq``."""
        if len(seq) == 0:
            return cls.empty()
        starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
        r = lt - lr
        add = np.add.reduceat
        return cls(
            np.diff(np.r_[starts, len(seq)]).astype(np.float64),
            add(per_token.k3(r), starts),
            add(np.abs(r), starts),
            add(lr, starts),
            add(lt, starts),
        )

    def merge(self, other: SeqStats) -> SeqStats:
        return SeqStats(*(np.concatenate([getattr(self, f), getattr(other, f)]) for f in FIELDS))

    def __len__(self) -> int:
        return len(self.tokens)

    def same(self, other: SeqStats) -> bool:
        """The same sequences' sums, in any order: two slices that hold the same data."""
        if len(self) != len(other):
            return False
        mine, theirs = (np.stack([getattr(s, f) for f in FIELDS], axis=1) for s in (self, other))
        for rows in (mine, theirs):
            rows[:] = rows[np.lexsort(rows.T[::-1])]
        return bool(np.array_equal(mine, theirs, equal_nan=True))


def _log_ppl(s: SeqStats) -> tuple[np.ndarray, np.ndarray]:
    """Per-sequence rollout and trainer log-ppl."""
    return -s.lr / s.tokens, -s.lt / s.tokens


@dataclass
class Interval:
    metric: str
    kind: str  # "ratio" (B / A) or "difference" (B - A)
    low: float | None
    high: float | None
    resamples: int


KINDS = {M.VLLM_KL: "ratio", M.ABS_LOG_RATIO_MEAN: "ratio", M.LOG_PPL_PEARSON: "difference"}


CHUNK = 50  # resamples drawn and evaluated at once (memory: CHUNK x sequences int32 picks)


Draws = dict[str, np.ndarray]  # metric -> its value in every resample of one side


def side_generators(seed: int = DEFAULT_SEED) -> tuple[np.random.Generator, np.random.Generator]:
    """The generators of side A and side B, both spawned from ``seed``."""
    rng_a, rng_b = np.random.default_rng(seed).spawn(2)
    return rng_a, rng_b


def paired_generator(seed: int = DEFAULT_SEED) -> np.random.Generator:
    """The generator of the paired bootstrap: the third child of ``seed`` (``side_generators``
    are the first two), i.e. ``np.random.default_rng(np.random.SeedSequence(seed,
    spawn_key=(2,)))``."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(2,)))


@dataclass
class PairedDraws:
    """Per resample of the pairs: vllm_kl of B minus that of A, and their ratio B / A."""

    difference: np.ndarray
    ratio: np.ndarray


def paired_draws(
    tokens: np.ndarray,
    k3_a: np.ndarray,
    k3_b: np.ndarray,
    resamples: int,
    rng: np.random.Generator,
    ahead: bool = False,
) -> PairedDraws:
    """The paired bootstrap of vllm_kl over ``n`` pairs of sequences (equal ``tokens`` on both
    sides; ``k3_a``, ``k3_b``: each side's K3 sum per sequence): every resample draws ``n``
    pair indices with replacement (``CHUNK`` resamples at a time, ``rng.integers(0, n, (k, n),
    int32)``), and takes ``sum k3_b / sum tokens - sum k3_a / sum tokens`` and ``sum k3_b /
    sum k3_a`` over the drawn pairs. ``ahead``: as for :func:`draws`."""
    from mismatchctl.stats.kernel_choice import PICK_COST, kernels_for

    n = len(tokens)
    values = np.ascontiguousarray(np.column_stack([tokens, k3_a, k3_b]), dtype=np.float64)
    sizes = [min(CHUNK, resamples - done) for done in range(0, resamples, CHUNK)]
    diff, ratio = [], []
    for picks in chunk_picks(rng, n, sizes, ahead):
        kernels = kernels_for(picks.size * values.shape[1] * PICK_COST)
        t, a, b = kernels.resample_sums(values, picks).T
        with np.errstate(divide="ignore", invalid="ignore"):
            diff.append(b / t - a / t)
            ratio.append(b / a)
    if not diff:
        return PairedDraws(np.zeros(0), np.zeros(0))
    return PairedDraws(np.concatenate(diff), np.concatenate(ratio))


def percentile_interval(values: np.ndarray) -> tuple[float | None, float | None, int]:
    """The 95% percentile interval of the finite values (``np.percentile``, linear), and how
    many there were."""
    values = values[np.isfinite(values)]
    if not len(values):
        return None, None, 0
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high), len(values)


def compare_intervals(
    a: SeqStats, b: SeqStats, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED
) -> dict[str, Interval]:
    """95% percentile intervals of B/A (ratios) and B-A (differences) over ``resamples`` draws.

    Each side draws from its own generator (:func:`side_generators`), ``CHUNK`` resamples at a
    time evaluated in one compiled pass. ``compare`` calls the steps itself, to overlap side A's
    draws with the reading of side B."""
    rng_a, rng_b = side_generators(seed)
    return intervals(draws(a, resamples, rng_a), draws(b, resamples, rng_b))


def intervals(va: Draws, vb: Draws) -> dict[str, Interval]:
    """The intervals from both sides' draws (equal numbers of resamples)."""
    out = {}
    for metric, kind in KINDS.items():
        with np.errstate(divide="ignore", invalid="ignore"):
            values = vb[metric] / va[metric] if kind == "ratio" else vb[metric] - va[metric]
        values = values[np.isfinite(values)]
        low, high = np.percentile(values, [2.5, 97.5]) if len(values) else (None, None)
        out[metric] = Interval(metric, kind, _f(low), _f(high), len(values))
    return out


def draws(s: SeqStats, resamples: int, rng: np.random.Generator, ahead: bool = False) -> Draws:
    """The metrics of ``resamples`` resamples of one side. ``ahead``: each chunk's picks are
    drawn on a second thread while the previous chunk is summed (the same draws, in the same
    order; for cores otherwise idle, as after the last part is read)."""
    values = _columns(s)
    sizes = [min(CHUNK, resamples - done) for done in range(0, resamples, CHUNK)]
    chunks = [_metrics(values, picks) for picks in chunk_picks(rng, len(s), sizes, ahead)]
    return {m: np.concatenate([c[m] for c in chunks]) if chunks else np.zeros(0) for m in KINDS}


def chunk_picks(
    rng: np.random.Generator, n: int, sizes: list[int], ahead: bool = False
) -> Iterator[np.ndarray]:
    """Each chunk's picks, ``rng.integers(0, n, (k, n), int32)`` for every ``k`` of ``sizes`` in
    turn; ``ahead``: the next chunk's drawn on a thread while the caller uses this one (numpy
    draws without the GIL, the compiled sums too)."""

    def draw(k: int) -> np.ndarray:
        return rng.integers(0, max(n, 1), size=(k, n), dtype=np.int32)

    if not ahead or len(sizes) < 2:
        yield from (draw(k) for k in sizes)
        return
    with ThreadPoolExecutor(max_workers=1) as pool:
        following = pool.submit(draw, sizes[0])
        for k in sizes[1:]:
            picks = following.result()
            following = pool.submit(draw, k)
            yield picks
        yield following.result()


def _resampled(s: SeqStats, k: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The metrics of ``k`` resamples of ``s`` (each: ``len(s)`` sequences drawn with
    replacement), as arrays of length ``k``."""
    return _metrics(_columns(s), next(chunk_picks(rng, len(s), [k])))


def _columns(s: SeqStats) -> np.ndarray:
    """The per-sequence columns whose resampled sums make the metrics, once per side: tokens,
    K3, |r| and the centred log-ppl moments (x, y, x², y², xy). Eight float64 columns in rows
    that start on a 64-byte boundary: a picked row is one cache line (the sums' random reads
    are most of their time)."""
    n = len(s)
    x, y = _log_ppl(s)
    x, y = x - x.mean(), y - y.mean()  # centred once: the moments below lose no precision
    columns = (s.tokens, s.k3, s.abs_r, x, y, x * x, y * y, x * y)
    buffer = np.empty(n * len(columns) + 8)
    start = (-buffer.ctypes.data % 64) // buffer.itemsize
    values = buffer[start : start + n * len(columns)].reshape(n, len(columns))
    for i, column in enumerate(columns):
        values[:, i] = column
    return values


def _metrics(values: np.ndarray, picks: np.ndarray) -> dict[str, np.ndarray]:
    """The metrics of the resamples of ``picks`` (a row each) over ``_columns``' rows."""
    from mismatchctl.stats.kernel_choice import PICK_COST, kernels_for

    kernels = kernels_for(picks.size * values.shape[1] * PICK_COST)
    tokens, k3, abs_r, sx, sy, sxx, syy, sxy = kernels.resample_sums(values, picks).T
    # every resample draws all n sequences: the count is n (a sum of n ones, exact in float64)
    count = np.full(len(picks), float(picks.shape[1]))
    with np.errstate(divide="ignore", invalid="ignore"):
        mx, my = sx / count, sy / count
        sxx, syy, sxy = sxx - count * mx * mx, syy - count * my * my, sxy - count * mx * my
        ok = (count >= 2) & (sxx > 0) & (syy > 0)
        r = np.where(ok, sxy / np.sqrt(np.where(ok, sxx * syy, 1.0)), np.nan)
        return {
            M.VLLM_KL: k3 / tokens,
            M.ABS_LOG_RATIO_MEAN: abs_r / tokens,
            M.LOG_PPL_PEARSON: np.clip(r, -1.0, 1.0),
        }


def _f(x: float | None) -> float | None:
    return None if x is None else float(x)
