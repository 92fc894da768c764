"""The bootstrap's resampled metrics equal a direct computation on the same draws."""

from __future__ import annotations

import numpy as np
import pytest

from mismatchctl.stats import kernels
from mismatchctl.stats.bootstrap import (
    CHUNK,
    SeqStats,
    _columns,
    _resampled,
    compare_intervals,
    draws,
    paired_draws,
)


def _stats(n: int, seed: int) -> SeqStats:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, 400, n).astype(np.float64)
    lr = -rng.random(n) * tokens * 0.4
    lt = lr + rng.normal(0, 0.5, n)
    return SeqStats(tokens, rng.random(n) * tokens * 0.01, rng.random(n) * tokens * 0.1, lr, lt)


def _direct(s: SeqStats, picks: np.ndarray) -> dict[str, float]:
    """One resample the plain way: bincount weights, centred Pearson around its own means."""
    w = np.bincount(picks, minlength=len(s)).astype(np.float64)
    x, y = -s.lr / s.tokens, -s.lt / s.tokens
    n = w.sum()
    mx, my = (w @ x) / n, (w @ y) / n
    dx, dy = x - mx, y - my
    r = (w @ (dx * dy)) / np.sqrt((w @ (dx * dx)) * (w @ (dy * dy)))
    return {
        "vllm_kl": (w @ s.k3) / (w @ s.tokens),
        "abs_log_ratio_mean": (w @ s.abs_r) / (w @ s.tokens),
        "log_ppl_pearson": r,
    }


def test_resample_sums_equal_gathered_sums() -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(size=(300, 5))
    picks = rng.integers(0, 300, size=(7, 300), dtype=np.int32)
    np.testing.assert_allclose(
        kernels.resample_sums(values, picks), values[picks].sum(axis=1), rtol=1e-12
    )


@pytest.mark.parametrize("seed", range(3))
def test_resampled_metrics_equal_the_direct_computation(seed: int) -> None:
    s = _stats(500, seed)
    got = _resampled(s, 4, np.random.default_rng(seed))
    picks = np.random.default_rng(seed).integers(0, len(s), size=(4, len(s)), dtype=np.int32)
    for k in range(4):
        want = _direct(s, picks[k])
        for name, value in want.items():
            assert got[name][k] == pytest.approx(value, rel=1e-9), name


def test_intervals_are_seeded_and_cover_identical_sides() -> None:
    s = _stats(400, 7)
    first = compare_intervals(s, s, resamples=CHUNK + 7, seed=3)
    again = compare_intervals(s, s, resamples=CHUNK + 7, seed=3)
    assert first == again
    for interval in first.values():
        assert interval.resamples == CHUNK + 7
        centre = 1.0 if interval.kind == "ratio" else 0.0
        assert interval.low < centre < interval.high


@pytest.mark.parametrize("resamples", [1, CHUNK, 2 * CHUNK + 13])
def test_draws_ahead_on_a_thread_are_the_same_draws(resamples: int) -> None:
    """Drawing the next chunk's picks on a thread while a chunk is summed changes nothing: the
    same generator calls in the same order, bit-identical metrics (paired ones too)."""
    s = _stats(300, 11)
    inline = draws(s, resamples, np.random.default_rng(4))
    ahead = draws(s, resamples, np.random.default_rng(4), ahead=True)
    for metric, values in inline.items():
        assert len(values) == resamples
        assert np.array_equal(values, ahead[metric], equal_nan=True), metric
    one = paired_draws(s.tokens, s.k3, s.abs_r, resamples, np.random.default_rng(2))
    two = paired_draws(s.tokens, s.k3, s.abs_r, resamples, np.random.default_rng(2), ahead=True)
    assert np.array_equal(one.difference, two.difference) and np.array_equal(one.ratio, two.ratio)


def test_resampled_columns_are_one_cache_line_a_row() -> None:
    """The per-sequence columns the sums gather: 8 float64 a row, rows on 64-byte boundaries."""
    for n in (1, 5, 300):
        values = _columns(_stats(n, n))
        assert values.shape == (n, 8) and values.ctypes.data % 64 == 0
        assert values.strides == (64, 8)
