"""The torch twin of the report's reductions (``monitor/device.py``, what the Monitor runs on an
accelerator) against the report's numpy code (``monitor/host.py``: ``stats.chunk``) on the same
CPU tensors: every column of the state, per batch and per probability bin, and the r-histograms
bin for bin. The Monitor itself reduces CPU tensors with the numpy code, so this test is what
checks the twin where no accelerator is."""

from __future__ import annotations

import numpy as np
import pytest

from mismatchctl.monitor.device import reduce_batch
from mismatchctl.monitor.host import reduce_numpy
from mismatchctl.stats.bins import LOG_EDGES, parse_bins
from mismatchctl.stats.tails import DEFAULT_TAILS, Tails

torch = pytest.importorskip("torch")


def padded(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows, width = 12, 64
    lt = -rng.exponential(1.0, (rows, width))
    lr = np.minimum(lt + rng.normal(0, 0.1, (rows, width)), 0.0)
    lt[3, 2] = lr[3, 2] - 30.0  # beyond every clamp
    lr[4, 5] = lt[4, 5]  # r == 0: the histogram's zero bin
    lr[4, 6] = lt[4, 6] - 1e-12  # |r| below 1e-9: its underflow bin
    mask = rng.random((rows, width)) < 0.8  # many turns per row
    mask[0] = False  # a row without a model token
    return lr, lt, mask


@pytest.mark.parametrize(
    ("bins", "tails"), [("log", DEFAULT_TAILS), ("linear:7", Tails(clamp=5.0, tau=1.5))]
)
@pytest.mark.parametrize("seed", [0, 1])
def test_the_torch_twin_gives_the_reports_state(seed: int, bins: str, tails: Tails) -> None:
    lr, lt, mask = padded(seed)
    edges = parse_bins(bins)
    want = reduce_numpy(lr, lt, mask, edges, tails)
    got = reduce_batch(
        torch.from_numpy(lr), torch.from_numpy(lt), torch.from_numpy(mask), edges, tails
    )
    np.testing.assert_allclose(got.state, want.state, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got.bins, want.bins, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(got.hists, want.hists)
    assert want.hists.sum() == mask.sum()


def test_a_batch_without_model_tokens_is_the_empty_state() -> None:
    lr, lt, mask = padded(0)
    got = reduce_batch(
        *(torch.from_numpy(a) for a in (lr, lt, mask & False)), LOG_EDGES, DEFAULT_TAILS
    )
    want = reduce_numpy(lr, lt, mask & False, LOG_EDGES, DEFAULT_TAILS)
    np.testing.assert_array_equal(got.state, want.state)
    assert got.hists.sum() == 0
