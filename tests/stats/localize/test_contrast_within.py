"""stats/localize.contrast_within against plain numpy references computed from the tokens: a
part of a region against the rest of that region, each at the region's own per-bin rates (the
same token mix), with the two parts' sequence-clustered variances added."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mismatchctl.stats.cube.cube import Cube
from mismatchctl.stats.localize.explain import contrast_within
from tests.stats.cube.cube_reference import random_tokens, small_spec

REL = 1e-9
Z = 1.959963984540054


def _data(seed: int, factor: float = 1.0) -> tuple:
    """Tokens of a small cube; ``factor`` times the K3 of gpu A100's later-turn tokens."""
    spec = small_spec(block_cap=16)
    rng = np.random.default_rng(seed)
    lr, _, seq, tok, seqc = random_tokens(spec, rng, 500)
    gpu, later = seqc[seq, 1], tok[:, 1] == 1
    sigma = 0.03 * (1 + np.sqrt(-lr)) * np.where((gpu == 0) & later, math.sqrt(factor), 1.0)
    lt = lr + sigma * rng.standard_normal(len(lr))
    cube = Cube.from_tokens(spec, lr, lt, seq, tok, seqc)
    r = lt - lr
    return cube, np.expm1(r) - r, seq, gpu, tok


def _smr(k3: np.ndarray, b: np.ndarray, mask: np.ndarray, within: np.ndarray) -> float:
    """Observed over expected K3 of the tokens in ``mask``, expected at the per-bin mean K3 of
    the tokens in ``within``."""
    rate = {v: k3[within & (b == v)].mean() for v in np.unique(b[within])}
    return k3[mask].sum() / sum(rate[v] for v in b[mask])


def _log_var(k3: np.ndarray, seq: np.ndarray, mask: np.ndarray) -> float:
    ids = np.unique(seq[mask])
    y = np.array([k3[mask & (seq == i)].sum() for i in ids])
    x = np.array([(mask & (seq == i)).sum() for i in ids], float)
    k = y.sum() / x.sum()
    return len(ids) / (len(ids) - 1) * np.sum((y - k * x) ** 2) / y.sum() ** 2


@pytest.mark.parametrize("factor", [1.0, 6.0])
def test_a_gpu_within_the_later_turns(factor: float) -> None:
    cube, k3, seq, gpu, tok = _data(1, factor)
    later, b = tok[:, 1] == 1, tok[:, 2]
    part, rest = later & (gpu == 0), later & (gpu == 1)
    found = contrast_within(cube, {"turn_kind": [1]}, "gpu", [0])
    assert found is not None
    ratio, (lo, hi) = found
    ref = _smr(k3, b, part, later) / _smr(k3, b, rest, later)
    assert ratio == pytest.approx(ref, rel=REL)
    half = Z * math.sqrt(_log_var(k3, seq, part) + _log_var(k3, seq, rest))
    assert lo == pytest.approx(ref * math.exp(-half), rel=REL)
    assert hi == pytest.approx(ref * math.exp(half), rel=REL)
    if factor > 1:
        assert lo > 3  # the planted part stands out of its region
    else:
        assert lo < 1 < hi


def test_a_token_dimension_within_a_gpu() -> None:
    cube, k3, _seq, gpu, tok = _data(2, 6.0)
    b, turn = tok[:, 2], tok[:, 0]
    within = gpu == 0
    found = contrast_within(cube, {"gpu": [0]}, "turn", [1, 2])
    assert found is not None
    ref = _smr(k3, b, within & (turn > 0), within) / _smr(k3, b, within & (turn == 0), within)
    assert found[0] == pytest.approx(ref, rel=REL)
    assert found[1][0] < found[0] < found[1][1]


def test_an_empty_side_or_a_blocked_dimension_gives_none() -> None:
    cube, *_ = _data(3)
    assert contrast_within(cube, {"turn_kind": [1]}, "turn", [0]) is None  # no later turn 0
    blocked = Cube(small_spec(block_cap=3), None)  # step (7 values) seen in blocks
    assert contrast_within(blocked, {}, "step", [1]) is None
