"""The tail-robust and framework-compatible metrics (docs/metrics.md, "Tail-robust metrics"):
``vllm_kl_clamped``, ``extreme_frac_tau{tau}``, ``is_oob_ratio``, ``prob_diff_mean`` and
``ratio_segment_mean``, each against a numpy float64 reference written here from its definition,
on hand-checked vectors with tails (|r| up to 700), through both kernels (the numpy one and the
compiled turn-run one), and merged from parts equal to one shot."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mismatchctl.stats import chunk_partials, merge_all, reference_metrics
from mismatchctl.stats import registry as M
from mismatchctl.stats.tails import Tails, parse_bounds
from mismatchctl.stats.turnruns import run_partials, turn_runs

# Two sequences, three turns in the first. r = lt - lr per token:
#   seq 0 turn 0: 0.1, -0.8, 12.0     seq 0 turn 1: 700.0, -0.5     seq 0 turn 2: -700.0
#   seq 1 turn 0: 0.0, 0.69, -0.7, 2.0
R = np.array([0.1, -0.8, 12.0, 700.0, -0.5, -700.0, 0.0, 0.69, -0.7, 2.0])
SEQ = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 1])
TURN = np.array([0, 0, 0, 1, 1, 2, 0, 0, 0, 0])
LR = np.array([-0.5, -0.1, -20.0, -705.0, -1.0, -1.0, -0.2, -3.0, -0.05, -4.0])
LT = LR + R


def _numpy_reference(r: np.ndarray, lr: np.ndarray, lt: np.ndarray, tails: Tails) -> dict:
    """Each definition, in float64, token by token."""
    c = np.clip(r, -tails.clamp, tails.clamp)
    with np.errstate(over="ignore"):
        rho = np.exp(r)
    return {
        M.VLLM_KL_CLAMPED: float(np.mean(np.expm1(c) - c)),
        tails.extreme_metric: float(np.mean(np.abs(r) > math.log(tails.tau))),
        M.IS_OOB_RATIO: float(np.mean((rho < tails.is_lower) | (rho > tails.is_upper))),
        M.PROB_DIFF_MEAN: float(np.mean(np.exp(lt) - np.exp(lr))),
    }


def _ratio_segment_mean() -> float:
    """By hand: per sequence, the token mean of each token's turn ratio exp(mean r of its turn);
    then the mean over sequences (ROLL's masked_mean(..., dim=-1).mean())."""
    seq0 = (
        3 * math.exp((0.1 - 0.8 + 12.0) / 3) + 2 * math.exp((700.0 - 0.5) / 2) + math.exp(-700.0)
    ) / 6
    seq1 = math.exp((0.0 + 0.69 - 0.7 + 2.0) / 4)
    return (seq0 + seq1) / 2


def _both_kernels(tails: Tails) -> list[dict]:
    numpy_kernel = chunk_partials(LR, LT, SEQ, np.zeros(10, np.int64), 1, turn=TURN, tails=tails)
    runs = turn_runs(LR, LT, SEQ, TURN.astype(np.int32), tails=tails)
    compiled = run_partials(runs, np.zeros(len(runs.starts), np.int64), 1)
    return [numpy_kernel[0].finalize(tails), compiled[0].finalize(tails)]


def test_hand_checked_values_with_tails() -> None:
    tails = Tails()
    expected_k3 = (
        (math.expm1(0.1) - 0.1) + (math.expm1(-0.8) + 0.8)
        + (math.expm1(10.0) - 10.0) * 2  # 12 and 700 clamp to 10
        + (math.expm1(-0.5) + 0.5) + (math.expm1(-10.0) + 10.0)  # -700 clamps to -10
        + 0.0 + (math.expm1(0.69) - 0.69) + (math.expm1(-0.7) + 0.7) + (math.expm1(2.0) - 2.0)
    ) / 10  # fmt: skip
    # |r| > ln 2 = 0.6931: -0.8, 12, 700, -700, -0.7, 2 (0.69 is just inside)
    # exp(r) outside [0.5, 2]: -0.8, 12, 700, -700, -0.7 (exp(-0.7) = 0.497), 2
    for metrics in _both_kernels(tails):
        assert metrics[M.VLLM_KL_CLAMPED] == pytest.approx(expected_k3, rel=1e-12)
        assert metrics[M.EXTREME_FRAC_TAU2] == 0.6
        assert metrics[M.IS_OOB_RATIO] == 0.6
        assert metrics[M.RATIO_SEGMENT_MEAN] == pytest.approx(_ratio_segment_mean(), rel=1e-9)
        assert metrics[M.OVERFLOW_TOKENS] == 0  # 700 < 709.78: K3 itself is finite but huge
        assert metrics[M.VLLM_KL] > 1e300
        ref = _numpy_reference(R, LR, LT, tails)
        for key, value in ref.items():
            assert metrics[key] == pytest.approx(value, rel=1e-9, abs=1e-15), key


@pytest.mark.parametrize(
    ("clamp", "tau", "bounds"),
    [(10.0, 2.0, (0.5, 2.0)), (1.0, 1.5, (0.8, 1.25)), (5.0, 3.0, (0.1, 9.0))],
)
def test_thresholds_change_the_numbers_as_defined(
    clamp: float, tau: float, bounds: tuple[float, float]
) -> None:
    tails = Tails(clamp, tau, *bounds)
    ref = _numpy_reference(R, LR, LT, tails)
    for metrics in _both_kernels(tails):
        assert tails.extreme_metric in metrics
        for key, value in ref.items():
            assert metrics[key] == pytest.approx(value, rel=1e-9, abs=1e-15), key


def test_extreme_fraction_is_named_by_its_tau() -> None:
    assert Tails().extreme_metric == "extreme_frac_tau2"
    assert Tails(tau=1.5).extreme_metric == "extreme_frac_tau1.5"
    assert M.by_key("extreme_frac_tau1.5") is Tails(tau=1.5).extreme_metric
    metrics = _both_kernels(Tails(tau=1.5))[0]
    assert "extreme_frac_tau1.5" in metrics and M.EXTREME_FRAC_TAU2 not in metrics
    assert metrics["extreme_frac_tau1.5"] == 0.8  # ln 1.5 = 0.405: -0.5 and 0.69 too


def test_overflowing_ratio_keeps_the_clamped_k3_finite() -> None:
    lr, lt = np.array([-800.0, -1.0]), np.array([0.0, -1.0])  # r = 800 > 709.78
    part = chunk_partials(lr, lt, np.array([0, 0]), np.zeros(2, np.int64), 1)[0]
    metrics = part.finalize()
    assert metrics[M.OVERFLOW_TOKENS] == 1 and metrics[M.VLLM_KL] == math.inf
    assert metrics[M.VLLM_KL_CLAMPED] == pytest.approx((math.expm1(10.0) - 10.0) / 2, rel=1e-12)
    assert metrics[M.IS_OOB_RATIO] == 0.5 and metrics[M.EXTREME_FRAC_TAU2] == 0.5


def _random_tokens(seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    seq, turn = [], []
    for i in range(60):
        for t in range(int(rng.integers(1, 4))):
            k = int(rng.integers(1, 40))
            seq += [i] * k
            turn += [t] * k
    n = len(seq)
    lr = -rng.exponential(1.0, n)
    r = rng.normal(0, 0.3, n) * np.where(rng.random(n) < 0.03, 400.0, 1.0)
    r = np.clip(r, -700.0, 700.0)
    return lr, lr + r, np.array(seq), np.array(turn, dtype=np.int32)


@pytest.mark.parametrize("seed", range(4))
def test_merged_parts_equal_one_shot_and_the_reference(seed: int) -> None:
    """Parts of whole sequences merged in any order equal one shot, on both kernels, and the
    package's reference (stats/reference.py) with turns."""
    lr, lt, seq, turn = _random_tokens(seed)
    tails = Tails(clamp=7.0, tau=1.7, is_lower=0.6, is_upper=1.9)
    cut = int(np.searchsorted(seq, 25))
    cut2 = int(np.searchsorted(seq, 41))
    pieces = [slice(0, cut), slice(cut, cut2), slice(cut2, None)]

    def numpy_part(s: slice) -> object:
        zeros = np.zeros(len(lr[s]), np.int64)
        return chunk_partials(lr[s], lt[s], seq[s], zeros, 1, turn=turn[s], tails=tails)[0]

    def compiled_part(s: slice) -> object:
        runs = turn_runs(lr[s], lt[s], seq[s], turn[s], tails=tails)
        return run_partials(runs, np.zeros(len(runs.starts), np.int64), 1)[0]

    ids = np.unique(seq)
    segs = [(lr[seq == i], lt[seq == i]) for i in ids]
    ref = reference_metrics(segs, tails, turns=[turn[seq == i] for i in ids])
    keys = [M.VLLM_KL_CLAMPED, tails.extreme_metric, M.IS_OOB_RATIO, M.PROB_DIFF_MEAN]
    keys.append(M.RATIO_SEGMENT_MEAN)
    for make in (numpy_part, compiled_part):
        one = make(slice(None)).finalize(tails)
        merged = merge_all([make(p) for p in reversed(pieces)]).finalize(tails)
        for key in keys:
            assert merged[key] == pytest.approx(one[key], rel=1e-12), key
            assert one[key] == pytest.approx(ref[key], rel=1e-9), key


def test_the_thresholds_are_checked() -> None:
    assert parse_bounds("0.5_2.0") == (0.5, 2.0)
    assert parse_bounds("4") == (0.25, 4.0)
    for bad in ("a_b", "1_2_3", "-2"):
        with pytest.raises(ValueError, match="LOWER_UPPER"):
            parse_bounds(bad)
    with pytest.raises(ValueError, match="clamp"):
        Tails(clamp=0.0)
    with pytest.raises(ValueError, match="tau"):
        Tails(tau=1.0)
    with pytest.raises(ValueError, match="lower < upper"):
        Tails(is_lower=2.0, is_upper=0.5)


def test_granularity_names_token_and_sequence_means() -> None:
    assert M.granularity(M.VLLM_KL) == "token-mean"
    assert M.granularity(M.VLLM_KL_SEQ_MEAN) == "sequence-mean"
    assert M.granularity(M.RATIO_SEGMENT_MEAN) == "sequence-mean"
    assert M.granularity(M.TOKENS) == "count"
