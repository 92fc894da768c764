"""`explain` on runs of 1,000 steps (tests/planted.py's dumps, two responses a step): a regime of
steps found and named as a range, the JSON keeping every step, the HTML's figure over the steps
grouped; a mismatch rising over the run explained late against early (mix against rate, where
the rise lives)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import mismatchctl
from mismatchctl import api
from mismatchctl.analysis.explain import MAX_BARS
from tests.helpers import cli
from tests.planted import LONG_KV, Plan, write_scaled

STEPS = 1000
REGIME = range(500, 750)  # whole blocks of the cube's 128 (7-8 steps each)


def _regime(row: dict, kv: np.ndarray) -> np.ndarray:
    """K3 x6 on every token of the regime's steps."""
    return np.full(len(kv), 6.0 if row["step"] in REGIME else 1.0)


def _growth(row: dict, kv: np.ndarray) -> np.ndarray:
    """The long contexts' K3 rising from x1 at the first step to x9 at the last."""
    return np.where(kv >= LONG_KV, 1.0 + 8.0 * row["step"] / (STEPS - 1), 1.0)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("long")
    for name, scale in (("regime", _regime), ("grow", _growth)):
        plan = Plan("clean", steps=STEPS, per_step=2, seed=3)
        dump = write_scaled(plan, root / f"{name}.parquet", scale)
        mismatchctl.ingest([dump], run=name, store=root / "store")
    return root / "store"


def test_a_regime_of_steps_is_found_and_named_as_a_range(store: Path) -> None:
    ran = cli("explain", "regime", "--store", str(store), "--json", "-", "-q")
    assert ran.code == 0, ran.err
    top = json.loads(ran.out)["explain"]["findings"][0]
    assert top["where"] == {"step": "500-749"} == top["named"]
    assert top["sentence"].startswith("step 500-749: 25% of tokens")
    assert top["rate_ratio_ci"][0] > 4.0


def test_the_figure_over_a_thousand_steps_is_grouped(store: Path) -> None:
    """The finding's rate figure draws at most ``MAX_BARS`` groups of consecutive steps (each
    at its tokens' mean K3, the regime's groups named), not a bar per step."""
    result = api.explain("regime", store=store, bootstrap=False)
    plot = result.plots[0]
    assert plot.dim == "step" and len(plot.labels) == MAX_BARS
    assert plot.labels[0] == "0-16" and plot.labels[-1] == "984-999"
    named = {int(b) for label in plot.highlighted for b in label.split("-")}
    assert min(named) <= 500 and max(named) >= 749 and max(named) < 800
    hot = [v for v, lab in zip(plot.target, plot.labels, strict=True) if lab in plot.highlighted]
    cold = [
        v for v, lab in zip(plot.target, plot.labels, strict=True) if lab not in plot.highlighted
    ]
    assert min(hot) > 2 * max(cold)


def test_a_rise_over_the_run_is_a_rate_in_the_long_contexts(store: Path) -> None:
    """The last 100 steps against the first 100: about 4.5x at the same token mix, a change of
    rate not of mix along every dimension, and the top finding in the long contexts."""
    args = ("explain", "grow@steps=900..999", "--baseline", "grow@steps=0..99")
    ran = cli(*args, "--store", str(store), "--json", "-", "-q")
    assert ran.code == 0, ran.err
    doc = json.loads(ran.out)["explain"]
    assert doc["rate_ratio_ci"][0] > 1.5 and doc["rate_ratio"] < 9
    split = {d["dim"]: d for d in doc["decomposition"]}
    for dim in ("kv_position", "turn_kind", "bin", "gpu"):
        assert split[dim]["rate"] > 5 * abs(split[dim]["mix"]), dim
    top = doc["findings"][0]["where"]
    assert "kv_position" in top or "turn" in top or "turn_kind" in top, top
    assert "step" in doc["unshared"]
