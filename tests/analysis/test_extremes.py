"""Numeric extremes: r of ±700, probabilities of exactly 1 (and 0, which ingest refuses), a single
token, and ratios beyond float64. Reports stay finite where the definition allows and say null
where it does not (docs/reliability.md, "Numeric extremes")."""

from __future__ import annotations

import html
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import FIXTURES, cli

ROOT = Path(__file__).resolve().parents[2]


def _dump(path: Path, rollout: list[list[float]], trainer: list[list[float]]) -> Path:
    n = len(rollout)
    pq.write_table(
        pa.table({"step": [0] * n, "rollout_log_probs": rollout, "old_log_probs": trainer}), path
    )
    return path


def _metrics(run: str) -> dict:
    ran = cli("report", run, "--json", "-", "--quiet")
    assert ran.code == 0, ran.err
    return json.loads(ran.out)["groups"][0]["metrics"]


def _all_commands_ok(run: str) -> None:
    """diagnose, whatif and compare (against an ordinary run) answer with valid JSON."""
    assert cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "base", "-q").code == 0
    for command in (["diagnose", run], ["whatif", run], ["compare", "base", run]):
        ran = cli(*command, "--json", "-", "--quiet")
        assert ran.code in (0, 3), ran.err  # 3: a diagnose check failed, which is an answer
        json.loads(ran.out)


def test_r_of_plus_and_minus_700(store: Path, tmp_path: Path) -> None:
    path = _dump(
        tmp_path / "d.parquet", [[-700.0, -0.1], [0.0, -0.2]], [[0.0, -0.1], [-700.0, -0.2]]
    )
    assert cli("ingest", str(path), "--run", "r", "-q").code == 0
    m = _metrics("r")
    assert m["tokens"] == 4 and m["abs_log_ratio_max"] == 700.0
    # exp(700) ~ 1e304 fits in float64: every metric defined on these tokens is a finite number
    expected_k3 = ((math.exp(700) - 1 - 700) + (math.exp(-700) - 1 + 700)) / 4
    assert m["vllm_kl"] == pytest.approx(expected_k3, rel=1e-12)
    assert m["log_ratio_mean"] == 0.0 and m["kl_k1"] == 0.0
    for name, value in m.items():
        assert value is None or math.isfinite(value), name
    assert m["log_ppl_pearson"] is not None  # two sequences, different log-ppls
    _all_commands_ok("r")


def test_probability_one(store: Path, tmp_path: Path) -> None:
    path = _dump(tmp_path / "d.parquet", [[0.0, 0.0, -0.0]], [[0.0, -0.0, 0.0]])
    assert cli("ingest", str(path), "--run", "one", "-q").code == 0
    m = _metrics("one")
    assert m["vllm_kl"] == 0.0 and m["abs_log_ratio_max"] == 0.0 and m["prob_abs_diff_max"] == 0.0
    assert m["prob_pearson"] is None  # a correlation of constants is undefined
    _all_commands_ok("one")


def test_probability_zero_is_refused_at_ingest(store: Path, tmp_path: Path) -> None:
    path = _dump(tmp_path / "d.parquet", [[-math.inf, -0.1]], [[-0.2, -0.1]])
    ran = cli("ingest", str(path), "--run", "zero", "-q")
    assert ran.code == 1
    assert ran.err.startswith(
        f"Error: {path}: sample `d#0` (row 0): rollout logprob -inf at position 0 of a model "
        "token (expected a finite value <= 0.0001)"
    )
    assert "Hint: fix the dump, or pass --skip-bad" in ran.err


def test_single_token(store: Path, tmp_path: Path) -> None:
    path = _dump(tmp_path / "d.parquet", [[-0.5]], [[-0.4]])
    assert cli("ingest", str(path), "--run", "single", "-q").code == 0
    m = _metrics("single")
    assert m["tokens"] == 1 and m["sequences"] == 1
    assert m["vllm_kl"] == pytest.approx(math.exp(0.1) - 1 - 0.1, rel=1e-12)
    assert m["log_ratio_std"] == 0.0
    assert m["prob_pearson"] is None and m["log_ppl_pearson"] is None  # need two points
    assert cli("report", "single", "--quiet").code == 0
    _all_commands_ok("single")


def test_beyond_float64_is_null_and_quiet(store: Path, tmp_path: Path) -> None:
    """r = 1e300: exp(r) is not a float64, so K3 and the ratio metrics are null, while the
    log-space metrics stay finite; and the user's terminal gets no numpy warnings."""
    path = _dump(tmp_path / "d.parquet", [[-1e300, -0.1]], [[0.0, -0.2]])
    assert cli("ingest", str(path), "--run", "huge", "-q").code == 0
    env = {**os.environ, "MISMATCHCTL_STORE": str(store), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "mismatchctl", "report", "huge", "--json", "-", "--quiet"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    assert "Warning" not in proc.stderr, proc.stderr
    m = json.loads(proc.stdout)["groups"][0]["metrics"]
    assert m["vllm_kl"] is None and m["ratio_dev_1e4"] is None
    assert m["overflow_tokens"] == 1  # why they are null: one token with exp(r) beyond float64
    assert m["kl_k1"] == pytest.approx(-5e299) and m["abs_log_ratio_max"] == 1e300
    _all_commands_ok("huge")


def test_overflow_is_said_the_same_way_everywhere(store: Path, tmp_path: Path) -> None:
    """Where JSON has null because exp(r) is beyond float64, the terminal and the HTML say
    "overflow" with the count of such tokens; never `inf`, `nan` or `nan%`."""
    path = _dump(
        tmp_path / "d.parquet",
        [[-1e300, -0.1], [-0.3, -0.2], [-800.0, -0.1]],
        [[0.0, -0.2], [-0.1, -0.2], [-0.05, -0.1]],
    )
    assert cli("ingest", str(path), "--run", "huge", "-q").code == 0
    assert cli("ingest", str(FIXTURES / "sequence.parquet"), "--run", "base", "-q").code == 0
    r = [1e300, -0.1, 0.2, 0.0, 799.95, 0.0]
    with np.errstate(over="ignore"):
        want = int(np.isinf(np.exp(np.array(r))).sum())
    assert want == 2
    doc = json.loads(cli("report", "huge", "--json", "-", "-q").out)
    whole = next(g["metrics"] for g in doc["groups"] if g["by"] == {})
    assert whole["overflow_tokens"] == want and whole["vllm_kl"] is None
    said = f"overflow: exp(r) is beyond float64 (r > 709.78) in {want} tokens"
    page = tmp_path / "r.html"
    for command in (
        ["report", "huge", "--by-gpu", "--html", str(page)],
        ["compare", "base", "huge", "--resamples", "50"],
        ["diagnose", "huge"],
        ["whatif", "huge"],
    ):
        ran = cli(*command)
        assert ran.code in (0, 3), (command, ran.err)
        words = re.findall(r"[\w%]+", ran.out)
        assert not {"inf", "nan", "nan%"} & set(words), (command, ran.out)
        assert "overflow" in ran.out, command
    report = cli("report", "huge", "-q").out
    assert said in " ".join(report.split())
    assert html.escape(said) in page.read_text()
    verdicts = cli("compare", "base", "huge", "--json", "-", "-q", "--resamples", "50").out
    row = next(
        r for r in json.loads(verdicts)["comparison"]["headline"] if r["metric"] == "vllm_kl"
    )
    assert row["b"] is None and row["ci_low"] is None and row["significant"] is None
    assert row["verdict"] == "vllm_kl: no comparison: overflow (beyond float64) in huge"
