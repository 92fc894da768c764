"""stats/localize.contrast_baseline against plain numpy references computed from the tokens: a
region of the selection against the same region of a baseline, at the baseline region's
per-bin rates (the selection region's own token mix), with the two sides' sequence-clustered
variances added."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mismatchctl.stats.cube.cube import Cube
from mismatchctl.stats.localize.explain import contrast_baseline
from tests.stats.cube.cube_reference import random_tokens, small_spec

REL = 1e-9
Z = 1.959963984540054
SPEC = small_spec(block_cap=16)


def _side(seed: int, factor: float) -> tuple:
    """Tokens of a small cube; ``factor`` times the K3 of gpu 1's tokens (a hot gpu)."""
    rng = np.random.default_rng(seed)
    lr, _, seq, tok, seqc = random_tokens(SPEC, rng, 500)
    gpu = seqc[seq, 1]
    sigma = 0.03 * (1 + np.sqrt(-lr)) * np.where(gpu == 1, math.sqrt(factor), 1.0)
    lt = lr + sigma * rng.standard_normal(len(lr))
    r = lt - lr
    return Cube.from_tokens(SPEC, lr, lt, seq, tok, seqc), np.expm1(r) - r, seq, gpu, tok[:, 2]


def _log_var(k3: np.ndarray, seq: np.ndarray, mask: np.ndarray) -> float:
    ids = np.unique(seq[mask])
    y = np.array([k3[mask & (seq == i)].sum() for i in ids])
    x = np.array([(mask & (seq == i)).sum() for i in ids], float)
    k = y.sum() / x.sum()
    return len(ids) / (len(ids) - 1) * np.sum((y - k * x) ** 2) / y.sum() ** 2


@pytest.mark.parametrize("factor", [1.0, 50.0])
def test_the_other_gpus_against_the_baselines(factor: float) -> None:
    """A hot gpu (1) in the selection only: outside it the selection is the baseline's level."""
    cube, k3, seq, gpu, b = _side(1, factor)
    base, k3b, seqb, gpub, bb = _side(2, 1.0)
    found = contrast_baseline(cube, base, {"gpu": [0]})
    assert found is not None
    ratio, (lo, hi) = found
    part, part_b = gpu == 0, gpub == 0
    rate = {v: k3b[part_b & (bb == v)].mean() for v in np.unique(bb[part_b])}
    ref = k3[part].sum() / sum(rate[v] for v in b[part])
    assert ratio == pytest.approx(ref, rel=REL)
    half = Z * math.sqrt(_log_var(k3, seq, part) + _log_var(k3b, seqb, part_b))
    assert lo == pytest.approx(ref * math.exp(-half), rel=REL)
    assert hi == pytest.approx(ref * math.exp(half), rel=REL)
    assert lo < 1 < hi  # the hot gpu's tokens are left out, whatever its factor
    hot = contrast_baseline(cube, base, {"gpu": [1]})
    assert hot is not None and (hot[1][0] > 10 if factor > 1 else hot[1][0] < 1 < hot[1][1])


def test_an_empty_region_gives_none() -> None:
    cube, *_ = _side(3, 1.0)
    assert contrast_baseline(cube, Cube(SPEC, None), {"gpu": [0]}) is None


def test_a_bit_exact_baseline_has_no_ratio_and_says_why() -> None:
    """A baseline whose two sides agree on every token (K3 exactly 0: a bit-exact stack): no
    rate ratio to it exists (not n/a dressed as "no excess"), every token of the selection is
    excess over it, and the note and the sentence say so."""
    from mismatchctl.stats.localize.explain import explain
    from mismatchctl.stats.localize.result import unlocated_sentence

    cube, k3, *_ = _side(1, 1.0)
    rng = np.random.default_rng(3)
    lr, _, seq, tok, seqc = random_tokens(SPEC, rng, 500)
    exact = Cube.from_tokens(SPEC, lr, lr.copy(), seq, tok, seqc)
    found = explain(cube, exact)
    assert found.baseline_vllm_kl == 0 and found.vllm_kl == pytest.approx(k3.mean(), rel=REL)
    assert found.rate_ratio is None and found.rate_ratio_ci is None
    assert any("agree on every token" in n for n in found.notes)
    if not found.findings:
        assert "no mismatch at all" in unlocated_sentence(found, "the selection")
