"""`explain`'s length-scaling test: a planted per-token bias (sums of r growing like T) against
planted noise (like sqrt(T)) through explain, its numbers equal to diagnose's length_scaling
evidence (the same sums, the same function), the sums against numpy on the dump, and the
terminal, JSON and HTML outputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import api
from mismatchctl.analysis.diagnose.check import evidence_of
from mismatchctl.analysis.diagnose.checks import length_scaling as length_scaling_check
from mismatchctl.stats.length_scaling import BIAS, MIDPOINT, NOISE
from tests.helpers import cli, slow_param
from tests.planted import diagnosis, write_biased

BIAS_PER_TOKEN = 0.05


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("explain-length")
    for name, bias, seed in (("noise", 0.0, 3), ("biased", BIAS_PER_TOKEN, 4)):
        dump = write_biased(root / f"{name}.parquet", bias, seed)
        mismatchctl.ingest([dump], run=name, store=root / "store", tags={"set": "planted"})
    return root / "store"


def _sums(store: Path, run: str) -> tuple[np.ndarray, np.ndarray]:
    """Each response's model tokens and sum of r, from the dump as written (numpy)."""
    rows = pq.read_table(store.parent / f"{run}.parquet").to_pylist()
    t, s = [], []
    for row in rows:
        m = np.asarray(row["response_mask"]) == 1
        r = np.asarray(row["old_log_probs"])[m] - np.asarray(row["rollout_log_probs"])[m]
        t.append(m.sum())
        s.append(r.sum())
    return np.asarray(t, np.float64), np.asarray(s)


def _side(store: Path, run: str, baseline: str | None = None) -> dict[str, dict]:
    found = api.explain(run, baseline, store=store, bootstrap=False)
    return found.to_dict()["explain"]["length_scaling"]


def test_planted_bias_grows_like_t_and_noise_like_sqrt_t(store: Path) -> None:
    sides = _side(store, "biased", "noise")
    biased, noise = sides["target"], sides["baseline"]
    assert (biased["selection"], noise["selection"]) == ("biased", "noise")
    assert biased["verdict"] == BIAS and biased["interval"][0] > MIDPOINT
    assert abs(biased["exponent"] - 1.0) < 0.2
    assert noise["verdict"] == NOISE and noise["interval"][1] < MIDPOINT
    assert abs(noise["exponent"] - 0.5) < 0.2
    t, s = _sums(store, "biased")
    assert biased["sequences"] == len(t)
    assert biased["bias_per_token"] == pytest.approx(s.sum() / t.sum(), rel=1e-6)
    assert biased["bias_per_token"] == pytest.approx(-BIAS_PER_TOKEN, rel=0.1)
    assert sum(b["sequences"] for b in biased["bins"]) == len(t)


@pytest.mark.parametrize("run", [slow_param("biased"), "noise"])
def test_the_numbers_are_diagnose_s_length_scaling_evidence(store: Path, run: str) -> None:
    check = next(c for c in diagnosis(store, run).checks if c.name == "length_scaling")
    found = evidence_of(check, length_scaling_check.Evidence)
    assert found is not None
    evidence = found.runs[run].to_dict()
    alone = _side(store, run)["target"]
    other = "noise" if run == "biased" else "biased"
    as_baseline = _side(store, other, run)["baseline"]
    for found in (alone, as_baseline):
        assert {k: v for k, v in found.items() if k != "selection"} == evidence


def test_a_selection_of_two_runs_is_tested_as_one(store: Path) -> None:
    both = api.explain("set=planted", store=store, bootstrap=False).length
    assert [s.side for s in both] == ["target"]
    t = np.concatenate([_sums(store, "biased")[0], _sums(store, "noise")[0]])
    assert both[0].result.sequences == len(t)


def test_terminal_json_html(store: Path, tmp_path: Path) -> None:
    page = tmp_path / "e.html"
    ran = cli("explain", "biased", "-b", "noise", "--store", str(store), "-q", "--no-bootstrap",
              "--html", str(page))  # fmt: skip
    assert ran.code == 0, ran.err
    assert "Length scaling" in ran.out and "Sums of r by response length" in ran.out
    assert "target biased: |sum r| grows as T^" in " ".join(ran.out.split())
    assert "like T: a per-token bias" in " ".join(ran.out.split())
    html = page.read_text()
    assert 'id="length-scaling"' in html and "Sums of r by response length" in html
    assert "like sqrt(T): independent per-token noise" in html
    ran = cli("explain", "biased", "--store", str(store), "-q", "--json", "-", "--no-bootstrap")
    out = json.loads(ran.out)["explain"]["length_scaling"]
    assert list(out) == ["target"] and out["target"]["verdict"] == BIAS
