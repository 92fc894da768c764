"""Merge laws of Partial (hypothesis): associative, commutative, empty is the identity.

Partitions are small on purpose: empty and one-row partitions are where merges break (the
Pearson merge of torchmetrics did).
"""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from stats_helpers import assert_metrics_close, flatten

from mismatchctl.stats import Partial, chunk_partials, reference_metrics
from tests.helpers import examples

N_GROUPS = 2

logprob = st.one_of(
    st.floats(min_value=-30.0, max_value=0.0),
    st.just(0.0),
    st.floats(min_value=0.0, max_value=1e-4),
)


@st.composite
def token(draw: st.DrawFn) -> tuple[float, float, int]:
    """(rollout, trainer, group) with the trainer equal, close, or unrelated to the rollout."""
    lr = draw(logprob)
    how = draw(st.sampled_from(["same", "close", "free"]))
    if how == "same":
        lt = lr
    elif how == "close":
        lt = min(1e-4, lr + draw(st.floats(min_value=-1e-3, max_value=1e-3)))
    else:
        lt = draw(logprob)
    return lr, lt, draw(st.integers(0, N_GROUPS - 1))


sequence = st.lists(token(), min_size=1, max_size=5)
partition = st.lists(sequence, min_size=0, max_size=4)


def _partials(seqs: list, first_id: int = 0) -> list[Partial]:
    tokens = [t for s in seqs for t in s]
    lr = np.array([t[0] for t in tokens], dtype=np.float64)
    lt = np.array([t[1] for t in tokens], dtype=np.float64)
    group = np.array([t[2] for t in tokens], dtype=np.int64)
    seq = np.repeat(np.arange(first_id, first_id + len(seqs)), [len(s) for s in seqs])
    return chunk_partials(lr, lt, seq, group, N_GROUPS, with_hist=True)


def _close(a: Partial, b: Partial) -> None:
    assert_metrics_close(a.finalize(), b.finalize())
    assert np.array_equal(a.hist, b.hist)


SETTINGS = settings(max_examples=examples(60), deadline=None)


@SETTINGS
@given(partition, partition, partition)
@example(  # near-constant probabilities: their Pearson correlation near 0 is ill-conditioned
    pa=[[(6.843209684176334e-06, 6.843209684176334e-06, 0)]],
    pb=[[(0.0, 0.0, 0), (0.0, 3.396810724231299e-05, 0)]],
    pc=[[(0.0, 0.0, 0), (0.0, 0.0, 0), (0.0, 0.0, 0)]],
)
def test_associative(pa, pb, pc) -> None:
    for a, b, c in zip(_partials(pa), _partials(pb), _partials(pc), strict=True):
        _close(a.merge(b).merge(c), a.merge(b.merge(c)))


@SETTINGS
@given(partition, partition)
def test_commutative_exactly(pa, pb) -> None:
    for a, b in zip(_partials(pa), _partials(pb), strict=True):
        ab, ba = a.merge(b), b.merge(a)
        assert np.array_equal(ab.state, ba.state)
        assert np.array_equal(ab.hist, ba.hist)


@SETTINGS
@given(partition)
def test_empty_is_identity_exactly(pa) -> None:
    for a in _partials(pa):
        for e in (Partial.empty(with_hist=True), Partial.empty()):
            for merged in (a.merge(e), e.merge(a)):
                assert np.array_equal(merged.state, a.state)
                assert np.array_equal(merged.hist, a.hist)
                assert merged.finalize() == a.finalize()


@SETTINGS
@given(st.lists(partition, min_size=1, max_size=5))
def test_merged_partitions_equal_reference(partitions) -> None:
    totals = [Partial.empty(with_hist=True) for _ in range(N_GROUPS)]
    first_id = 0
    for p in partitions:
        totals = [t.merge(c) for t, c in zip(totals, _partials(p, first_id), strict=True)]
        first_id += len(p)
    seqs = [s for p in partitions for s in p]
    for g in range(N_GROUPS):
        segs = [_segment(s, g) for s in seqs]
        got = totals[g].finalize()
        quantiles = {k: got.pop(k) for k in ("log_ratio_p01", "log_ratio_p50", "log_ratio_p99")}
        assert_metrics_close(got, reference_metrics(segs))
        assert (quantiles["log_ratio_p50"] is None) == (got["tokens"] == 0)


def _segment(s: list, g: int) -> tuple[np.ndarray, np.ndarray]:
    lr, lt, _ = flatten([(np.array([t[0] for t in s]), np.array([t[1] for t in s]))])
    mask = np.array([t[2] == g for t in s])
    return lr[mask], lt[mask]
