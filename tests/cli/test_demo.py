"""The demo: the bundled sample data ingested, reported on, and written as HTML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import cli

ROOT = Path(__file__).parents[2]


@pytest.mark.slow
def test_demo_runs_on_the_bundled_sample_data(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    store, page = tmp_path / "store", tmp_path / "demo.html"
    ran = cli("demo", "--store", str(store), "--html", str(page), "-q")
    assert ran.code == 0, ran.err
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


def test_demo_without_sample_data(tmp_path: Path) -> None:
    ran = cli("demo", "--store", str(tmp_path / "s"), "--data", str(tmp_path), "-q")
    assert ran.code == 1
    assert ran.err.startswith(f"Error: no sample data manifest at {tmp_path / 'manifest.json'}")
