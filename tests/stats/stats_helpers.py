"""Shared data generators and comparators of the stats tests."""

from __future__ import annotations

import math

import numpy as np

from mismatchctl.stats import Partial, chunk_partials

Seq = tuple[np.ndarray, np.ndarray]

REL = 1e-9
ABS = 1e-12
# ratio_dev_1e4 is scaled by 1e4 after ``mean(rho) - 1`` cancels: its rounding floor scales too.
# A Pearson correlation of near-constant values (probabilities within 1e-4 of 1) near 0 is the
# small difference of large centred products: the merge order moves it by ~1e-11 absolute (found
# by hypothesis: 0.00148715975 vs ...267 relative 1.3e-8); 1e-9 absolute on a value in [-1, 1].
ABS_SCALE = {"ratio_dev_1e4": 1e4, "prob_pearson": 1e3, "log_ppl_pearson": 1e3}


def realistic_rollout(rng: np.random.Generator, n: int) -> np.ndarray:
    """Logprobs in [-30, 1e-4]: many near 0, some exactly 0.0, some tiny positive (rounding)."""
    lr = -rng.exponential(rng.choice([0.01, 0.5, 4.0], size=n))
    kind = rng.random(n)
    lr[kind < 0.15] = 0.0
    tiny = kind > 0.95
    lr[tiny] = rng.uniform(0.0, 1e-4, size=int(tiny.sum()))
    return np.clip(lr, -30.0, 1e-4)


def realistic_trainer(rng: np.random.Generator, lr: np.ndarray) -> np.ndarray:
    """Trainer logprobs: identical, nudged by float noise, or clearly off, per token."""
    scale = rng.choice([0.0, 1e-7, 1e-3, 0.05, 1.0], size=len(lr), p=[0.2, 0.2, 0.3, 0.2, 0.1])
    lt = lr + rng.normal(0.0, 1.0, size=len(lr)) * scale
    return np.clip(lt, -30.0, 1e-4)


def make_sequences(
    rng: np.random.Generator, n_seq: int, max_len: int = 60, min_len: int = 1
) -> list[Seq]:
    """Random sequences of model tokens with realistic logprobs."""
    out = []
    for _ in range(n_seq):
        n = int(rng.integers(min_len, max_len + 1))
        lr = realistic_rollout(rng, n)
        out.append((lr, realistic_trainer(rng, lr)))
    return out


def flatten(seqs: list[Seq], first_id: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Concatenated lr, lt and the sequence id of every token."""
    if not seqs:
        empty = np.zeros(0)
        return empty, empty, np.zeros(0, dtype=np.int64)
    lr = np.concatenate([s[0] for s in seqs])
    lt = np.concatenate([s[1] for s in seqs])
    seq = np.repeat(np.arange(first_id, first_id + len(seqs)), [len(s[0]) for s in seqs])
    return lr, lt, seq


def one_group(seqs: list[Seq], *, with_hist: bool = False, first_id: int = 0) -> Partial:
    """The Partial of all tokens of ``seqs`` as a single group."""
    lr, lt, seq = flatten(seqs, first_id)
    group = np.zeros(len(lr), dtype=np.int64)
    return chunk_partials(lr, lt, seq, group, 1, with_hist=with_hist)[0]


def close(
    a: float | int | None, b: float | int | None, rel: float = REL, abs_: float = ABS
) -> bool:
    """Equal within ``max(abs_, rel * max(|a|, |b|))``; None only equals None; inf only itself."""
    if a is None or b is None:
        return a is None and b is None
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


def assert_metrics_close(
    got: dict, want: dict, rel: float = REL, abs_: float = ABS, context: str = ""
) -> None:
    """Every metric of both dicts agrees (same keys; see ``close``)."""
    assert set(got) == set(want), f"{context}: keys differ: {set(got) ^ set(want)}"
    bad = {
        k: (got[k], want[k])
        for k in want
        if not close(got[k], want[k], rel, abs_ * ABS_SCALE.get(k, 1.0))
    }
    assert not bad, f"{context}: metrics differ (got, want): {bad}"


# The golden vector of the metric definitions (hand-checked with numpy): two sequences,
# A and B, with B's middle token masked.
GOLDEN = {
    "tokens": 5,
    "sequences": 2,
    "vllm_kl": 0.0349923,
    "vllm_kl_seq_mean": 0.0309438,
    "kl_k1": -0.12,
    "kl_k2": 0.03,
    "chi2_token": 0.405767,
    "ratio_dev_1e4": 1549.92,
    "abs_log_ratio_mean": 0.16,
    "abs_log_ratio_max": 0.5,
    "trainer_log_ppl": 0.691667,
    "rollout_log_ppl": 0.808333,
    "trainer_ppl": 2.114743,
    "rollout_ppl": 2.389791,
    "log_ppl_diff": -0.116667,
    "ppl_ratio": 0.890005,
    "chi2_seq": 0.858683,
    "prob_pearson": 0.985090,
    "prob_abs_diff_mean": 0.040377,
    "prob_abs_diff_max": 0.109945,
}
