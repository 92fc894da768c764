"""The demo: the bundled sample data ingested, reported on, and written as HTML."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import Ran, cli
from tests.render.test_report_html import (
    DEMO_PAGE_BYTES,
    DEMO_PAGE_HEIGHT,
    FIGURE_BYTES,
    NEEDS_CHROMIUM,
    _chromium,
    check_drawn,
)

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Ran, Path, Path]:
    """The demo run once for the module (a minute of CI): its output, store and page."""
    tmp = tmp_path_factory.mktemp("demo")
    store, page = tmp / "store", tmp / "demo.html"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NO_COLOR", "1")
        ran = cli("demo", "--store", str(store), "--html", str(page), "-q")
    assert ran.code == 0, ran.err
    return ran, store, page


@pytest.mark.slow
def test_demo_runs_on_the_bundled_sample_data(
    demo: tuple[Ran, Path, Path], tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    ran, store, page = demo
    manifest = json.loads((ROOT / "sample_data" / "manifest.json").read_text())
    for run in manifest["runs"]:
        assert run["name"] in ran.out
    assert "SYNTHETIC" in ran.err and "By hardware" in ran.out
    assert f"HTML report: {page.resolve()}" in ran.err
    # the demo's store is not the default one: it says how to point the other commands at it
    said = " ".join(ran.err.split())
    assert f"add --store {store} to each command, or `export MISMATCHCTL_STORE={store}`" in said
    text = page.read_text()
    for run in manifest["runs"]:  # each run's block, its diagnosis folded under it
        assert f'id="run-{run["name"]}"' in text and f'id="diagnosis-{run["name"]}"' in text
    # the synthetic run's (synthetic) training log is attached: its curves are joined to vllm_kl
    assert "Training curves: synthetic-gpus" in ran.out and "actor/grad_norm" in ran.out
    assert "3 step(s) in the training logs have no dumps: 9-11" in ran.out
    assert "actor/grad_norm" in text and "critic/score/mean" in text
    # the MoE runs are ingested with their routes (the manifest's `ingest` options): the report
    # has a Routing section with their rows, and their diagnosis names flips and a capture bug
    moe = [run["name"] for run in manifest["runs"] if "ingest" in run]
    assert moe and "Routing (MoE)" in ran.out and "Routing (MoE)" in text
    for name in moe:
        assert f"Routing of {name}" in ran.out and f"Routing of {name}" in text
    assert "routing flips carry" in text and "replay is on and" in text
    report = tmp_path / "report.json"
    assert cli("report", "synthetic-gpus", "--store", str(store), "--json", str(report)).code == 0
    curves = json.loads(report.read_text())["curves"]["synthetic-gpus"]
    assert curves["roles"]["grad_norm"] == "actor/grad_norm"
    assert curves["only_log_steps"] == [9, 10, 11]
    pearson = {c["metric"]: c["pearson"] for c in curves["correlations"]}
    assert pearson["actor/grad_norm"] > 0.5 and pearson["critic/score/mean"] < 0
    assert [d["step"] for d in curves["events"]["reward_drops"]] == [6]  # sample_data/README.md
    again = cli("demo", "--store", str(store), "--html", str(page), "-q")  # reuses the store
    assert again.code == 0


@pytest.mark.slow
def test_demo_page_size(demo: tuple[Ran, Path, Path]) -> None:
    """Sixteen runs' report, 53 figures: one file of at most 8 MB (it was 26 MB with each
    figure's JSON in full), plotly.js in it once."""
    from plotly.offline import get_plotlyjs

    from mismatchctl.render.html import packed_figures

    text = demo[2].read_text()
    assert len(text.encode()) <= DEMO_PAGE_BYTES
    assert text.count(get_plotlyjs()) == 1 and "<script src" not in text
    figures = packed_figures(text)
    assert len(figures) > 48 and max(len(f) for f in figures) <= FIGURE_BYTES


@pytest.mark.browser
@NEEDS_CHROMIUM
@pytest.mark.slow
def test_demo_page_height_and_screenshot(demo: tuple[Ran, Path, Path], tmp_path: Path) -> None:
    _, _, page = demo
    got = check_drawn(page, tmp_path)
    assert got["drawn_on_load"] < got["plots"]  # the folded runs' figures wait to be opened
    assert got["height"] <= DEMO_PAGE_HEIGHT, got["height"]
    assert got["summary_bottom"] <= 900
    shot = tmp_path / "shot.png"
    _chromium(f"--screenshot={shot}", page.as_uri(), tmp=tmp_path)
    from PIL import Image

    with Image.open(shot) as image:
        pixels = np.asarray(image.convert("RGB"))
    assert pixels.shape[:2] == (900, 1400)
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 20  # a drawn page, not a blank one


def test_demo_without_sample_data(tmp_path: Path) -> None:
    ran = cli("demo", "--store", str(tmp_path / "s"), "--data", str(tmp_path), "-q")
    assert ran.code == 1
    assert ran.err.startswith(f"Error: no sample data manifest at {tmp_path / 'manifest.json'}")


def test_manifest_ingest_options(tmp_path: Path) -> None:
    """A run's `ingest` options become the ingest's route options; an unknown key is refused
    with the run and the keys it may hold."""
    from mismatchctl.errors import InputError
    from mismatchctl.sample_runs import load_manifest

    run = {"name": "m", "path": "runs/m", "format": "parquet-sequence"}
    manifest = tmp_path / "manifest.json"
    manifest.write_text(
        json.dumps({"runs": [run, {**run, "name": "n", "ingest": {"routes_topk": 2}}]})
    )
    plain, moe = load_manifest(tmp_path)
    assert (plain.routes.top_k, plain.routes.num_experts, plain.routes.aligned) == (
        0,
        None,
        "input",
    )
    assert moe.routes.top_k == 2
    manifest.write_text(json.dumps({"runs": [{**run, "ingest": {"topk": 2}}]}))
    with pytest.raises(
        InputError, match=r"run `m`: `ingest` holds \['topk'\], expected .*routes_topk"
    ):
        load_manifest(tmp_path)


def test_the_sample_runs_legend_lines_up() -> None:
    """Every run's kind starts in one column: names longer than the old fixed 16 characters
    (faulty-attn-subtle is 18) pushed theirs out of line."""
    from mismatchctl.cli.demo import legend
    from mismatchctl.sample_runs import load_manifest

    runs = load_manifest()
    longest = max(len(run.name) for run in runs)
    assert longest > 16
    lines = legend(runs)
    assert len(lines) == len(runs)
    for run, line in zip(runs, lines, strict=True):
        kind = "captured" if run.captured else "SYNTHETIC"
        assert line.index(kind) == 2 + longest + 2, line
        assert line.startswith(f"  {run.name} ") and line.endswith(f"  {run.shows}")
