"""The golden vector of METRICS.md, by the reference and by the partial aggregates."""

from __future__ import annotations

import numpy as np
import pytest
from stats_helpers import GOLDEN, assert_metrics_close

from mismatchctl.stats import chunk_partials, reference_metrics

# Sequences A and B of METRICS.md, mask applied (B's masked middle token dropped).
A_TRAINER, A_ROLLOUT = [-0.1, -1.0, -2.0], [-0.1, -0.9, -2.5]
B_TRAINER, B_ROLLOUT = [-0.5, -0.2], [-0.7, -0.2]


def _golden_partial_metrics() -> dict:
    lr = np.array(A_ROLLOUT + B_ROLLOUT)
    lt = np.array(A_TRAINER + B_TRAINER)
    seq = np.array([0, 0, 0, 1, 1])
    group = np.zeros(5, dtype=np.int64)
    return chunk_partials(lr, lt, seq, group, 1)[0].finalize()


def _golden_reference_metrics() -> dict:
    seqs = [(np.array(A_ROLLOUT), np.array(A_TRAINER)), (np.array(B_ROLLOUT), np.array(B_TRAINER))]
    return reference_metrics(seqs)


@pytest.mark.parametrize("source", [_golden_reference_metrics, _golden_partial_metrics])
def test_golden_vector_to_printed_digits(source) -> None:
    got = source()
    for name, want in GOLDEN.items():
        assert got[name] == pytest.approx(want, rel=1e-5, abs=1e-9), name


def test_golden_vector_reference_equals_partials() -> None:
    assert_metrics_close(_golden_partial_metrics(), _golden_reference_metrics(), rel=1e-12)


def test_golden_vector_derived_values() -> None:
    """The metrics METRICS.md does not print follow from the printed ones."""
    got = _golden_partial_metrics()
    assert got["log_ratio_mean"] == pytest.approx(0.12)
    assert got["log_ppl_abs_diff"] == pytest.approx(0.116667, rel=1e-5)
    assert got["log_ppl_pearson"] == pytest.approx(1.0)  # two points are always collinear
    assert got["log_ratio_std"] == pytest.approx(np.std([0.0, -0.1, 0.5, 0.2, 0.0]))
