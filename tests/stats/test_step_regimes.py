"""stats/step_regimes and stats/localize.contrast against plain numpy references computed from
the tokens themselves: per-step rate ratios at the same token mix (indirect standardization by
the run's per-bin rates), their sequence-clustered log variances, Cochran's homogeneity test,
the random-effects trend, and the split of planted elevated steps."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mismatchctl.stats.cube.cube import Cube
from mismatchctl.stats.localize.explain import contrast, explain
from mismatchctl.stats.step_regimes import homogeneity, split_steps, step_rates, trend
from tests.stats.cube.cube_reference import random_tokens, small_spec

REL = 1e-9


def _data(seed: int, hot: tuple[int, ...] = (), factor: float = 1.0) -> tuple:
    spec = small_spec(block_cap=16)  # step (7 values) unblocked
    rng = np.random.default_rng(seed)
    lr, _, seq, tok, seqc = random_tokens(spec, rng, 400)
    step = seqc[seq, 0]
    # r ~ N(0, sigma^2) growing with -lr, so K3 ~ r^2 / 2: ``factor`` times the K3 in ``hot``
    sigma = 0.03 * (1 + np.sqrt(-lr)) * np.where(np.isin(step, hot), math.sqrt(factor), 1.0)
    lt = lr + sigma * rng.standard_normal(len(lr))
    cube = Cube.from_tokens(spec, lr, lt, seq, tok, seqc)
    r = lt - lr
    return cube, np.expm1(r) - r, seq, step, tok[:, 2].astype(int)


def _smr(k3: np.ndarray, b: np.ndarray, mask: np.ndarray) -> float:
    """Observed over expected K3 of the tokens in ``mask``, expected at the whole selection's
    per-bin mean K3."""
    rate = {v: k3[b == v].mean() for v in np.unique(b)}
    return k3[mask].sum() / sum(rate[v] for v in b[mask])


def _log_var(k3: np.ndarray, seq: np.ndarray, mask: np.ndarray) -> float:
    """Sandwich variance of the mass of ``mask`` given its tokens, sequences as clusters, over
    the mass squared."""
    ids = np.unique(seq[mask])
    y = np.array([k3[mask & (seq == i)].sum() for i in ids])
    x = np.array([(mask & (seq == i)).sum() for i in ids], float)
    k = y.sum() / x.sum()
    g = len(ids)
    return g / (g - 1) * np.sum((y - k * x) ** 2) / y.sum() ** 2


def test_step_rates_are_standardized_ratios_with_clustered_variances() -> None:
    cube, k3, seq, step, b = _data(1)
    rates = step_rates(cube)
    present = np.unique(step)
    assert [int(s) for s in rates.labels] == [int(s) for s in present]
    for i, s in enumerate(present):
        mask = step == s
        assert rates.ratio[i] == pytest.approx(_smr(k3, b, mask), rel=REL)
        assert rates.log_var[i] == pytest.approx(_log_var(k3, seq, mask), rel=REL)
        assert rates.tokens[i] == mask.sum()
        assert rates.sequences[i] == len(np.unique(seq[mask]))


def test_homogeneity_is_cochrans_q() -> None:
    cube, _k3, _seq, _step, _b = _data(2, hot=(3,), factor=30.0)
    rates = step_rates(cube)
    x, v = np.log(rates.ratio), rates.log_var
    w = 1 / v
    pooled = np.sum(w * x) / np.sum(w)
    q_ref = np.sum(w * (x - pooled) ** 2)
    q, p, spread = homogeneity(rates)
    assert q == pytest.approx(q_ref, rel=REL)
    assert p < 1e-6 and spread > 1


def test_trend_is_the_random_effects_line() -> None:
    cube, _k3, _seq, _step, _b = _data(3)
    rates = step_rates(cube)
    x, y, v = rates.numbers, np.log(rates.ratio), rates.log_var
    # DerSimonian-Laird for a line, written out: fixed-effect fit, Q, then tau^2
    w = 1 / v
    slope, icpt = np.polyfit(x, y, 1, w=np.sqrt(w))
    q = np.sum(w * (y - icpt - slope * x) ** 2)
    xw = np.sum(w * x) / np.sum(w)
    trace = (
        np.sum(w)
        - np.sum(w * w) / np.sum(w)
        - np.sum(w * w * (x - xw) ** 2) / np.sum(w * (x - xw) ** 2)
    )
    tau2 = max(0.0, (q - (len(x) - 2)) / trace)
    w2 = 1 / (v + tau2)
    slope2, _ = np.polyfit(x, y, 1, w=np.sqrt(w2))
    se = math.sqrt(1 / np.sum(w2 * (x - np.sum(w2 * x) / np.sum(w2)) ** 2))
    span = x.max() - x.min()
    fit = trend(cube, rates)
    assert fit is not None
    assert fit.rise == pytest.approx(math.exp(slope2 * span), rel=1e-7)
    assert fit.spread == pytest.approx(math.exp(math.sqrt(tau2)), rel=1e-7)
    half = 1.959963984540054 * se * span
    assert fit.ci[0] == pytest.approx(math.exp(slope2 * span - half), rel=1e-7)


@pytest.mark.parametrize("stratum", ["bin", None])
def test_contrast_is_the_ratio_of_standardized_ratios(stratum: str | None) -> None:
    cube, k3, _seq, step, b = _data(4)
    region = np.isin(step, [2, 5])
    found = contrast(cube, {"step": [2, 5]}, stratum)
    assert found is not None
    if stratum is None:
        ref = k3[region].mean() / k3[~region].mean()
    else:
        ref = _smr(k3, b, region) / _smr(k3, b, ~region)
    assert found[0] == pytest.approx(ref, rel=REL)
    assert found[1][0] < found[0] < found[1][1]


@pytest.mark.parametrize("factor", [4.0, 300.0])
def test_split_finds_the_planted_steps(factor: float) -> None:
    hot = (1, 4, 5)
    cube, k3, _seq, step, _b = _data(5, hot=hot, factor=factor)
    rates = step_rates(cube)
    split = split_steps(cube, rates)
    assert split is not None
    assert sorted(int(rates.labels[i]) for i in split.elevated) == list(hot)
    same = contrast(cube, {"step": list(hot)}, "bin")
    assert same is not None and split.ratio == pytest.approx(same[0], rel=REL)
    assert split.ci[0] > 1 and split.p_value < 1e-3
    region = np.isin(step, hot)
    assert split.elevated_level == pytest.approx(k3[region].mean(), rel=REL)
    assert split.rest_level == pytest.approx(k3[~region].mean(), rel=REL)


def test_one_regime_is_not_split() -> None:
    cube, *_ = _data(6)
    rates = step_rates(cube)
    _, p, _ = homogeneity(rates)
    assert p > 0.01  # healthy steps: homogeneity holds, the checks report no split


def test_a_run_s_view_makes_its_cube_s_tables_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """diagnose's view of a run (its steps' rates, split, trend and localization) reads the
    cube's search tables made once, with the same results as each step making its own."""
    from types import SimpleNamespace

    from mismatchctl.analysis.diagnose.build import run_view
    from mismatchctl.stats.localize import tables

    cube, *_ = _data(5, hot=(1, 4, 5), factor=4.0)
    made = []
    init = tables.SideTables.__init__

    def counted(self: tables.SideTables, c: Cube) -> None:
        made.append(c)
        init(self, c)

    monkeypatch.setattr(tables.SideTables, "__init__", counted)
    report = SimpleNamespace(selection=SimpleNamespace(runs=[]))
    view = run_view(report, "r", cube)  # type: ignore[arg-type]
    assert len(made) == 1
    rates = step_rates(cube)
    split, fit = split_steps(cube, rates), trend(cube, rates)
    assert len(made) == 4  # each its own when not given them
    assert split is not None and fit is not None
    assert np.array_equal(view.rates.ratio, rates.ratio)
    assert view.split == split and view.trend == fit
    assert view.local.to_dict() == explain(cube).to_dict()
