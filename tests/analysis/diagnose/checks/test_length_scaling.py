"""The length-scaling test (``stats/length_scaling.py``) and its diagnose check: a planted
per-token bias (the sums grow like T) against planted independent noise (like sqrt(T)), the
exponent against an exact reference, and the check's verdicts on planted runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import mismatchctl
from mismatchctl.analysis.diagnose.check import evidence_of
from mismatchctl.analysis.diagnose.checks import length_scaling as length_scaling_check
from mismatchctl.stats.length_scaling import BIAS, LENGTH_EDGES, NOISE, length_scaling
from tests.planted import checks as diagnosed
from tests.planted import write_biased


def _sums(seed: int, bias: float, noise: float, n: int = 600) -> tuple[np.ndarray, np.ndarray]:
    """Per sequence: T from 4 to 512 tokens, S the sum of T draws of bias + N(0, noise^2)."""
    rng = np.random.default_rng(seed)
    t = np.exp(rng.uniform(np.log(4), np.log(512), n)).astype(np.int64)
    s = np.array([bias * k + noise * rng.standard_normal(k).sum() for k in t])
    return t, s


@pytest.mark.parametrize("seed", range(3))
def test_noise_grows_like_sqrt_t_and_bias_like_t(seed: int) -> None:
    noise = length_scaling(*_sums(seed, 0.0, 0.02))
    bias = length_scaling(*_sums(seed, 0.01, 0.02))
    assert noise.verdict == NOISE and abs(noise.exponent - 0.5) < 0.1
    assert bias.verdict == BIAS and abs(bias.exponent - 1.0) < 0.15
    lo, hi = bias.interval
    assert 0.75 < lo < bias.exponent < hi
    assert bias.bias_per_token == pytest.approx(0.01, rel=0.1)
    assert bias.crossover_tokens == pytest.approx(0.02**2 / 0.01**2, rel=0.3)


def test_the_exponent_equals_a_direct_weighted_fit() -> None:
    t, s = _sums(5, 0.003, 0.02)
    res = length_scaling(t, s)
    code = np.searchsorted(np.asarray(LENGTH_EDGES[1:]), t, side="right")
    xs, ys, ws = [], [], []
    for k in np.unique(code):
        m = code == k
        if m.sum() >= 8:
            xs.append(np.log(t[m].mean()))
            ys.append(0.5 * np.log((s[m] ** 2).mean()))
            ws.append(m.sum())
    slope = np.polyfit(xs, ys, 1, w=np.sqrt(ws))[0]
    assert res.exponent == pytest.approx(slope, rel=1e-9)
    assert res.bias_per_token == pytest.approx(s.sum() / t.sum(), rel=1e-12)
    assert [b.sequences for b in res.bins] == [int((code == k).sum()) for k in np.unique(code)]


def test_lengths_too_alike_are_not_tested() -> None:
    res = length_scaling(np.full(100, 40), np.random.default_rng(0).normal(0, 0.1, 100))
    assert res.exponent is None and res.verdict is None and res.interval is None


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("length")
    for name, bias in (("clean", 0.0), ("biased", 0.05)):
        mismatchctl.ingest(
            [write_biased(root / f"{name}.parquet", bias, 3)], run=name, store=root / "s"
        )
    return root / "s"


def test_the_check_warns_on_a_bias_and_passes_noise(store: Path) -> None:
    clean = diagnosed(store, "clean")["length_scaling"]
    biased = diagnosed(store, "biased")["length_scaling"]
    assert clean.verdict == "ok", clean.finding
    assert biased.verdict == "warn", biased.finding
    assert "like T: a per-token bias" in biased.finding
    assert biased.next and "temperature" in biased.next
    found = evidence_of(biased, length_scaling_check.Evidence)
    assert found is not None
    run = found.runs["biased"]
    assert run.verdict == BIAS and run.interval is not None and run.interval[0] > 0.75
    assert found.to_dict()["runs"]["biased"] == run.to_dict()  # the JSON as the result writes it


def test_a_mismatch_growing_with_the_length_is_not_a_bias() -> None:
    """Noise whose size grows with the position (a long-context kernel): |sum r| grows faster
    than T; not the constant bias the check warns of."""
    rng = np.random.default_rng(1)
    t = np.exp(rng.uniform(np.log(4), np.log(512), 600)).astype(np.int64)
    s = np.array([(rng.standard_normal(k) * 1e-4 * np.arange(k) ** 1.5).sum() for k in t])
    res = length_scaling(t, s)
    assert res.verdict == "growing" and res.interval[0] > 1.25
