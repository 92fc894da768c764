"""stats/gpu_shuffle against the tokens: the split (the hottest gpus' pooled K3 per token over
the others', the largest over the ranked splits) computed from the responses; its p-value among
random deals of the gpus within each run and step: near its floor for a gpu that is hot, large
for a split that a few heavy responses make, 1 where every stratum holds one gpu."""

from __future__ import annotations

import numpy as np
import pytest

from mismatchctl.stats import assign_bins, parse_bins
from mismatchctl.stats.gpu_shuffle import DRAWS, gpu_split
from mismatchctl.stats.hot_sequences import hot_sequence_state

EDGES = parse_bins("log")
N_BINS = len(EDGES) - 1
REL = 1e-9


def _tokens(seed: int, hot_gpu: float = 1.0, heavy: int = 0, sequences: int = 64) -> tuple:
    """Sequences of 10-60 tokens over four gpus (sequence i on gpu i % 4) and two steps; the
    noise of gpu0's sequences times ``hot_gpu``; the first ``heavy`` sequences of gpus 1-3
    thirty times the noise."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(10, 60, sequences)
    index = np.repeat(np.arange(sequences), lengths)
    seq = index * 3 + 2
    gpu = np.array([f"gpu{i % 4}" for i in index], object)
    step = (index >= sequences // 2).astype(np.int64) + 1
    lr = -rng.exponential(rng.choice([0.02, 0.5, 3.0], len(seq)))
    scale = np.where(index % 4 == 0, hot_gpu, 1.0)
    scale = scale * np.where((index % 4 != 0) & (index < heavy * 4 // 3 + 1), 30.0, 1.0)
    r = 0.05 * scale * lr * rng.standard_normal(len(seq))
    return lr, lr + r, seq, step, gpu


def _states(tokens: tuple) -> list:
    lr, lt, seq, step, gpu = tokens
    bins = assign_bins(np.exp(lr), EDGES)
    turn = np.zeros(len(seq), np.int32)
    state = hot_sequence_state(lr, lt, seq, turn, step, bins, N_BINS, "a", gpu=gpu)
    return list(state.runs().values())


def _reference_ratio(tokens: tuple) -> tuple[float, set[str]]:
    lr, lt, _, _, gpu = tokens
    r = lt - lr
    k3 = np.expm1(r) - r
    labels = sorted(set(gpu))
    rate = {g: k3[gpu == g].sum() / (gpu == g).sum() for g in labels}
    ranked = sorted(labels, key=lambda g: -rate[g])
    best, hot = -np.inf, set()
    for k in range(1, len(ranked)):
        on = np.isin(gpu, ranked[:k])
        ratio = (k3[on].sum() / on.sum()) / (k3[~on].sum() / (~on).sum())
        if ratio > best:
            best, hot = ratio, set(ranked[:k])
    return float(best), hot


@pytest.mark.parametrize(("hot_gpu", "heavy"), [(1.0, 0), (4.0, 0), (1.0, 3)])
def test_the_split_equals_the_tokens(hot_gpu: float, heavy: int) -> None:
    tokens = _tokens(1, hot_gpu, heavy)
    found = gpu_split(_states(tokens))
    ratio, hot = _reference_ratio(tokens)
    assert found is not None and found.responses == 64 and found.draws == DRAWS
    assert found.ratio == pytest.approx(ratio, rel=REL)
    assert set(found.hot) == hot


def test_a_hot_gpu_stands_and_a_few_heavy_responses_do_not() -> None:
    hot = gpu_split(_states(_tokens(2, hot_gpu=4.0)))
    assert hot is not None and hot.hot == ("gpu0",) and hot.p_value == 1 / (DRAWS + 1)
    few = gpu_split(_states(_tokens(2, heavy=2)))
    assert few is not None and few.ratio > 3 and few.p_value > 0.05
    again = gpu_split(_states(_tokens(2, heavy=2)))
    assert again == few  # the draws are seeded


def test_deals_stay_within_their_run_and_step() -> None:
    """Each step on one gpu of its own: no deal can move a response to the other gpu, every
    draw splits as far as the data (p-value 1)."""
    lr, lt, seq, step, _ = _tokens(3, hot_gpu=4.0)
    gpu = np.array([f"gpu{s}" for s in step], object)
    found = gpu_split(_states((lr, lt, seq, step, gpu)))
    assert found is not None and found.p_value == 1.0


def test_fewer_than_two_gpus_is_no_split() -> None:
    lr, lt, seq, step, _ = _tokens(4)
    one = np.full(len(seq), "gpu0", object)
    assert gpu_split(_states((lr, lt, seq, step, one))) is None
    none = np.full(len(seq), None, object)
    assert gpu_split(_states((lr, lt, seq, step, none))) is None


def test_a_large_selection_is_dealt_fewer_times_never_under_the_floor() -> None:
    """``DRAW_BUDGET`` responses dealt in all: 999 deals of a small selection, fewer of a
    large one, never under ``MIN_DRAWS``; a gpu hot by 1.5x on every response stands."""
    from mismatchctl.stats.gpu_shuffle import DRAW_BUDGET, MIN_DRAWS
    from mismatchctl.stats.hot_sequences import COLUMNS, HotSequenceState

    def state(n: int) -> HotSequenceState:
        rng = np.random.default_rng(7)
        sums = np.zeros((n, COLUMNS))
        sums[:, 0] = rng.integers(50, 500, n)
        gpu = np.array([f"gpu{i % 4}" for i in range(n)], object)
        sums[:, 4] = rng.exponential(1e-3, n) * sums[:, 0] * np.where(gpu == "gpu0", 1.5, 1.0)
        ar = np.arange(n)
        step = np.sort(rng.integers(0, 10, n))
        return HotSequenceState(["r"], np.zeros(n, np.int64), step, ar, ar, np.zeros(n, np.int64),
                                sums, gpu)  # fmt: skip

    assert gpu_split([state(5_000)]).draws == DRAWS
    large = gpu_split([state(40_000)])
    assert large is not None and large.draws == DRAW_BUDGET // 40_000 < DRAWS
    assert large.hot == ("gpu0",) and large.p_value == 1 / (large.draws + 1)
    assert gpu_split([state(400_000)]).draws == MIN_DRAWS
