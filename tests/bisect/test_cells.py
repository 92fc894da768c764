"""``bisect``'s sample stratified by the hot cells: explain's finding on a run whose engine
has a path outside the grid beyond KV position 16 (the engine's bf16 path elsewhere), a cell
given by hand, the strata's shares and weights, the per-cell verdict and the HTML section."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mismatchctl import api
from mismatchctl.analysis.bisect.metrics import Resamples
from mismatchctl.analysis.bisect.sample import allot, strata_of
from mismatchctl.errors import UsageError
from mismatchctl.render import html
from tests.helpers import cli
from tests.render.test_report_html import NEEDS_CHROMIUM, check_drawn

ENGINE_PATH = ["bf16", "bf16+incremental"]


def test_explains_hot_cell_is_sampled_and_judged_apart(runs: Path, ckpt: Path) -> None:
    """explain finds kv_position 16-31; bisect says nothing reproduces the rollout side there,
    while in the control sample (sequences that end before 16) the engine path does."""
    b = api.bisect("split", str(ckpt), store=runs, sample=20, settings=ENGINE_PATH)
    hot, control = b.cells
    assert hot.label == "kv_position 16-31" and hot.source == "explain"
    assert hot.sentence.startswith("kv_position 16-31:")
    assert (hot.stratum, control.stratum) == (30, 10)  # 6 and 2 sequences of 8, five steps
    assert (hot.drawn, control.drawn) == (15, 5)  # a quarter to the control
    assert not b.by_cell_reproduces[hot.label] and not b.reproduces
    # the short sequences' bf16 logprobs are about the same decoded or not: bf16 alone accounts
    # for most of their rollout side (93-100% where the CPU has AVX-512, 89% with AVX2 only: its
    # bf16 matrix products round by the shapes of the batch), and the verdict says so at 90%
    best = b.outcome(b.by_cell_best["control"]).by_cell["control"].share
    assert b.by_cell_best["control"] in ENGINE_PATH and best > 0.85
    assert b.by_cell_reproduces["control"] == (best >= 0.9)
    engine = b.outcome("bf16+incremental")
    assert engine.by_cell["control"].share > 0.5 > abs(engine.by_cell[hot.label].share)
    lines = b.to_dict()["bisect"]["verdict"]
    cell_line = next(t for t in lines if t.startswith("in the hot cell (kv_position 16-31)"))
    assert "nothing here reproduces the rollout side" in cell_line and "look there" in cell_line
    assert any(t.startswith("in the control sample") for t in lines)


def test_a_cell_given_by_hand(runs: Path, ckpt: Path) -> None:
    """--cell kv_position=16-31 (the --where grammar): the same cell without explain."""
    ran = cli("bisect", "split", "--model", str(ckpt), "--cell", "kv_position=16-31",
              "--sample", "12", "--settings", "bf16+incremental", "--store", str(runs),
              "--json", "-", "-q")  # fmt: skip
    assert ran.code == 0, ran.err
    d = json.loads(ran.out)["bisect"]
    assert [(c["cell"], c["source"]) for c in d["cells"]] == [
        ("kv_position=16-31", "given"), ("control", "control")]  # fmt: skip
    assert d["cells"][0]["reproduces"] is False and d["cells"][1]["reproduces"] is True
    by_cell = d["settings"][1]["by_cell"]
    assert by_cell["kv_position=16-31"]["tokens"] > 0 and by_cell["control"]["tokens"] > 0
    with pytest.raises(UsageError, match="no kv_position has that value"):
        api.bisect("split", str(ckpt), store=runs, cells=["kv_position=17"])
    with pytest.raises(UsageError, match="no model token of `split` is in the cell"):
        api.bisect("split", str(ckpt), store=runs, cells=["kv_position=64"])


def test_a_run_without_a_hot_cell_is_sampled_uniformly(runs: Path, ckpt: Path) -> None:
    b = api.bisect("temp", str(ckpt), store=runs, settings=["temperature=0.8"])
    assert b.cells == [] and b.cells_note and "uniform" in b.cells_note
    assert b.by_cell_best == {}


def test_strata_shares_and_weights() -> None:
    """Control a quarter, the rest in equal parts; what a small stratum cannot use goes to the
    others; a sequence's stratum is its first cell."""
    assert allot([100, 100, 100], 20) == [8, 7, 5]
    assert allot([3, 100, 100], 20) == [3, 10, 7]
    assert allot([3, 2, 4], 20) == [3, 2, 4]
    assert allot([50, 0], 8) == [8, 0]  # no control stratum: all to the cell
    assert strata_of([7, 8, 9], {7: 0b10, 8: 0b11}, 2).tolist() == [1, 0, 2]
    # the weighted ratio: a stratum drawn 1 in 3 counts three times
    rs = Resamples(3, 0, np.array([0, 0, 1]), np.array([1.0, 1.0, 3.0]))
    point, reps = rs.interval(np.array([1.0, 1.0, 4.0]), np.array([1.0, 1.0, 1.0]))
    assert point == pytest.approx(14 / 5)
    assert np.all(reps[~np.isnan(reps)] >= 1) and rs.weights[:, 2].tolist() == [3.0] * 1000


def test_the_html_section(runs: Path, ckpt: Path, tmp_path: Path) -> None:
    out = tmp_path / "bisect.html"
    ran = cli("bisect", "split", "--model", str(ckpt), "--cell", "kv_position=16-31",
              "--sample", "12", "--settings", "bf16+incremental", "--store", str(runs),
              "--html", str(out), "-q")  # fmt: skip
    assert ran.code == 0, ran.err
    page = out.read_text()
    for anchor in ("bisect-verdict", "bisect-cells", "bisect-settings", "bisect-cells-settings",
                   "bisect-k3"):  # fmt: skip
        assert f'id="{anchor}' in page, anchor
    assert "nothing here reproduces the rollout side" in page
    figure = next(f for f in html.page_json_blocks(page) if "data" in f)
    names = [t["name"] for t in figure["data"]]
    assert names == ["overall", "kv_position=16-31", "control"]
    assert figure["data"][0]["x"] == ["start", "bf16+incremental"]


@pytest.mark.browser
@NEEDS_CHROMIUM
@pytest.mark.slow
def test_the_html_page_draws_in_chromium(runs: Path, ckpt: Path, tmp_path: Path) -> None:
    """The page loads without a script error and its figure is drawn."""
    out = tmp_path / "bisect.html"
    ran = cli("bisect", "split", "--model", str(ckpt), "--cell", "kv_position=16-31",
              "--sample", "12", "--settings", "bf16+incremental", "--store", str(runs),
              "--html", str(out), "-q")  # fmt: skip
    assert ran.code == 0, ran.err
    got = check_drawn(out, tmp_path)
    assert got["plots"] == 1
