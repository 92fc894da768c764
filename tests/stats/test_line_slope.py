"""stats/line_slope: the slope of the trainer's logprobs on the rollout's from each sequence's
sums (``seq_sums``'s ``line``), against a least-squares fit of every token, and its distance to
1 over a bootstrap of the sequences: a temperature's line under noise that hides it from the
share of variance, and noise alone."""

from __future__ import annotations

import numpy as np
import pytest

from mismatchctl.stats import per_token
from mismatchctl.stats.line_slope import line_slope
from mismatchctl.stats.seq_sums import seq_sums


def _run(slope: float, noise: float, seed: int = 3, n_seq: int = 192) -> tuple:
    """Responses of 40-200 tokens; r = (slope - 1) lr + a shift of each response's own (the
    log-partition its contexts share) + independent noise of ``noise`` |lr|^0.5 (a precision
    loss, whatever the logprob); a NaN token the sums leave out."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(40, 200, n_seq)
    seq = np.repeat(np.arange(n_seq), lengths)
    lr = -rng.exponential(rng.choice([0.05, 0.5, 3.0], len(seq)))
    shift = np.repeat(rng.normal(0.0, 0.002, n_seq), lengths)
    r = (slope - 1) * lr + shift + noise * np.sqrt(-lr) * rng.standard_normal(len(seq))
    lr[7] = np.nan
    return lr, lr + r, seq


def _line(lr: np.ndarray, lt: np.ndarray, seq: np.ndarray) -> np.ndarray:
    zeros = np.zeros(len(seq), np.int64)
    return seq_sums("run", lr, lt, seq, zeros, zeros, zeros, 1).runs["run"].line


def test_the_slope_from_the_sequences_sums_is_the_tokens_least_squares() -> None:
    lr, lt, seq = _run(0.9946, 0.07)
    ok = np.isfinite(lr)
    expected = np.polyfit(lr[ok], lt[ok], 1)[0]
    found = line_slope(_line(lr, lt, seq))
    assert found is not None and found.slope == pytest.approx(expected, rel=1e-9)


def test_a_temperature_under_noise_is_far_from_one_and_noise_alone_is_not() -> None:
    """A slope of 0.9946 under noise that leaves the line a few percent of r's variance is many
    standard errors from 1; the same noise alone stays within the healthy few."""
    lr, lt, seq = _run(0.9946, 0.07)
    ok = np.isfinite(lr)
    r = (lt - lr)[ok]
    share = np.corrcoef(lr[ok], r)[0, 1] ** 2
    assert share < 0.05  # under the temperature check's share of variance
    found = line_slope(_line(lr, lt, seq))
    assert found is not None and found.t < -6
    for seed in (3, 4, 5):
        quiet = line_slope(_line(*_run(1.0, 0.07, seed)))
        assert quiet is not None and abs(quiet.t) < 3.5


def test_too_few_sequences_or_no_spread_give_no_slope() -> None:
    lr, lt, seq = _run(1.0, 0.05, n_seq=2)
    assert line_slope(_line(lr, lt, seq)) is None
    flat = np.full(len(seq), -0.5)
    assert (
        line_slope(_line(flat, flat + 0.01, np.repeat(np.arange(5), len(seq) // 5 + 1)[: len(seq)]))
        is None
    )


def test_the_callers_log_ratio_gives_the_sums_of_the_tokens_own() -> None:
    """``seq_sums`` with each token's r and K3 handed in (the engine's ``PartKeys.log_ratio``,
    shared with the other sums of a slice) has every sum of its own computation, to the bit;
    the vectors handed in are the ones summed."""
    lr, lt, seq = _run(0.9946, 0.07)
    zeros = np.zeros(len(seq), np.int64)
    r = lt - lr
    with np.errstate(invalid="ignore"):
        k3 = per_token.k3(r)
    own = seq_sums("run", lr, lt, seq, zeros, zeros, zeros, 1).runs["run"]
    given = seq_sums("run", lr, lt, seq, zeros, zeros, zeros, 1, (r, k3)).runs["run"]
    for name in own.__dataclass_fields__:
        assert np.array_equal(getattr(own, name), getattr(given, name), equal_nan=True), name
    doubled = seq_sums("run", lr, lt, seq, zeros, zeros, zeros, 1, (r, 2 * k3)).runs["run"]
    assert np.allclose(doubled.k3, 2 * own.k3, equal_nan=True)


def test_the_line_share_from_sums_against_numpy() -> None:
    """``line_share``: the squared correlation of ``lr`` and ``r`` from the six sums, as numpy's
    ``corrcoef`` gives it on the tokens; None without spread."""
    from mismatchctl.stats.line_slope import line_share

    rng = np.random.default_rng(5)
    lr = rng.normal(-1.0, 1.0, 400)
    r = 0.1 * lr + rng.normal(0.0, 0.2, 400)
    sums = np.array([len(lr), lr.sum(), (lr * lr).sum(), r.sum(), (r * r).sum(), (lr * r).sum()])
    want = np.corrcoef(lr, r)[0, 1] ** 2
    assert line_share(sums) == pytest.approx(want, rel=1e-9)
    flat = np.array([3.0, -3.0, 3.0, 0.3, 0.05, -0.3])  # lr constant at -1
    assert line_share(flat) is None
