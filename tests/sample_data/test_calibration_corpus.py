"""The calibration corpus generator end to end (slow): `sample_data/calibrate.py --size tiny`
writes its runs and corpus.json; the fault runs' vllm_kl stands above their baselines', the
healthy pair's does not; a second call skips the runs present and retrains nothing, and --force
writes the same bytes again from the cached checkpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "sample_data" / "calibrate.py"
TINY_RUNS = ("h-a", "h-b", "sem-raw-loud", "pol-stale-ckpt")


def calibrate(out: Path, *args: str) -> str:
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--size", "tiny", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_tiny_corpus(tmp_path: Path) -> None:
    out = tmp_path / "corpus"
    log = calibrate(out)
    corpus = json.loads((out / "corpus.json").read_text())
    runs = {r["name"]: r for r in corpus["runs"]}
    assert tuple(runs) == TINY_RUNS
    assert all(f"run {name}: " in log for name in TINY_RUNS)  # a progress line per run
    assert runs["h-a"]["kind"] == "healthy" and runs["h-a"]["cause"] is None
    assert runs["sem-raw-loud"]["cause"] == "semantics" and runs["sem-raw-loud"]["size"] == "loud"
    assert runs["pol-stale-ckpt"]["baseline"] == "h-b"
    assert 0.5 < runs["h-a"]["ratio_to_baseline"] < 2.0  # two healthy runs: no excess
    assert runs["sem-raw-loud"]["ratio_to_baseline"] > 3.0
    assert runs["pol-stale-ckpt"]["ratio_to_baseline"] > 1.5
    for name in TINY_RUNS:
        files = sorted((out / "runs" / name).glob("step_*.parquet"))
        assert len(files) == corpus["runs"][0]["steps"], name
        table = pq.read_table(files[0])
        assert table.schema.metadata == {b"source": b"calibration"}  # no descriptive tags
        assert "prompts" in table.column_names and "gpu" not in table.column_names
        lengths = [len(p) for p in table.column("prompts").to_pylist()]
        assert min(lengths) > 0
    a = pq.read_table(out / "runs" / "h-a" / "step_0001.parquet").column("prompts").to_pylist()
    b = pq.read_table(out / "runs" / "h-b" / "step_0001.parquet").column("prompts").to_pylist()
    assert a != b  # the baseline pair has other prompts
    cached = list((out / "cache").glob("*.pt"))
    assert len(cached) == 1  # the one model the tiny runs need
    again = calibrate(out, "--only", "h-a,sem-raw-loud")
    assert "h-a: present, skipped" in again and "trained" not in again
    assert json.loads((out / "corpus.json").read_text()) == corpus
    first = (out / "runs" / "h-a" / "step_0001.parquet").read_bytes()
    forced = calibrate(out, "--only", "h-a", "--force")
    assert "run h-a: " in forced and "trained" not in forced  # checkpoints from the cache
    assert (out / "runs" / "h-a" / "step_0001.parquet").read_bytes() == first
