"""report and compare with the tail-robust thresholds (--clamp, --tau, --is-bounds): the numbers of
every group equal a numpy reference written here, the thresholds and each metric's granularity
are in the JSON, bad thresholds are usage errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl.stats import assign_bins
from mismatchctl.stats.bins import LOG_EDGES
from tests.helpers import cli

ARGS = ("--clamp", "3", "--tau", "1.5", "--is-bounds", "0.8_1.25")


def _dump(path: Path, seed: int = 5) -> list[dict]:
    """Two turns per sequence (a tool response masked between), a few tokens with |r| in the
    hundreds (up to 650); returns each sequence's model tokens and turn indices."""
    rng = np.random.default_rng(seed)
    rows, truth = [], []
    for i in range(40):
        n = int(rng.integers(6, 50))
        mask = np.ones(n, np.int8)
        mask[n // 2 : n // 2 + 2] = 0
        lr = -rng.exponential(1.0, n)
        lt = np.minimum(lr + rng.normal(0, 0.3, n), 0.0)
        tail = rng.random(n) < 0.05  # one side near 0, the other in the hundreds
        far = -rng.uniform(100.0, 650.0, n)
        up = rng.random(n) < 0.5
        lr[tail & up], lt[tail & up] = far[tail & up], -0.1
        lr[tail & ~up], lt[tail & ~up] = -0.1, far[tail & ~up]
        rows.append(
            dict(
                step=i % 3,
                uid=f"u{i}",
                rollout_log_probs=lr.tolist(),
                old_log_probs=lt.tolist(),
                response_mask=mask.tolist(),
            )
        )
        turn = np.cumsum(np.diff(np.concatenate([[0], mask])) == 1) - 1
        keep = mask == 1
        truth.append(dict(step=i % 3, lr=lr[keep], lt=lt[keep], turn=turn[keep]))
    pq.write_table(pa.table({k: [r[k] for r in rows] for k in rows[0]}), path)
    return truth


def _reference(truth: list[dict]) -> dict[str, float]:
    """The definitions of docs/metrics.md, in float64, with clamp 3, tau 1.5, bounds 0.8..1.25."""
    lr = np.concatenate([t["lr"] for t in truth])
    lt = np.concatenate([t["lt"] for t in truth])
    r = lt - lr
    c = np.clip(r, -3.0, 3.0)
    with np.errstate(over="ignore"):
        rho = np.exp(r)
    per_seq = []
    for t in truth:
        rr, values = t["lt"] - t["lr"], np.empty(len(t["lr"]))
        for k in np.unique(t["turn"]):
            sel = t["turn"] == k
            values[sel] = np.exp(np.mean(rr[sel]))
        per_seq.append(values.mean())
    return {
        "vllm_kl_clamped": float(np.mean(np.expm1(c) - c)),
        "extreme_frac_tau1.5": float(np.mean(np.abs(r) > math.log(1.5))),
        "is_oob_ratio": float(np.mean((rho < 0.8) | (rho > 1.25))),
        "prob_diff_mean": float(np.mean(np.exp(lt) - np.exp(lr))),
        "ratio_segment_mean": float(np.mean(per_seq)),
    }


@pytest.fixture
def tails_run(store: Path, tmp_path: Path) -> list[dict]:
    truth = _dump(tmp_path / "dump.parquet")
    mismatchctl.ingest([tmp_path / "dump.parquet"], run="t", store=store)
    return truth


def _groups(doc: dict, *keys: str) -> dict[tuple, dict]:
    return {
        tuple(g["by"][k] for k in keys): g["metrics"]
        for g in doc["groups"]
        if set(g["by"]) == set(keys)
    }


def test_report_groups_equal_the_reference(store: Path, tails_run: list[dict]) -> None:
    ran = cli("report", "t", "--json", "-", "-q", *ARGS)
    assert ran.code == 0, ran.err
    doc = json.loads(ran.out)
    assert doc["tails"] == {"clamp": 3.0, "tau": 1.5, "is_bounds": [0.8, 1.25]}
    whole = _groups(doc)[()]
    assert "extreme_frac_tau2" not in whole
    for key, value in _reference(tails_run).items():
        assert whole[key] == pytest.approx(value, rel=1e-9, abs=1e-15), key
    for (_, step), got in _groups(doc, "run", "step").items():
        want = _reference([t for t in tails_run if t["step"] == step])
        for key, value in want.items():
            assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-15), (step, key)


def test_bins_carry_the_token_tail_metrics(store: Path, tails_run: list[dict]) -> None:
    doc = json.loads(cli("report", "t", "--json", "-", "-q", *ARGS).out)
    lr = np.concatenate([t["lr"] for t in tails_run])
    lt = np.concatenate([t["lt"] for t in tails_run])
    bins = assign_bins(np.exp(lr), LOG_EDGES)
    for (_, b), got in _groups(doc, "run", "bin").items():
        sel = bins == b
        assert got["prob_diff_mean"] == pytest.approx(
            float(np.mean(np.exp(lt[sel]) - np.exp(lr[sel]))), rel=1e-9, abs=1e-15
        )
        extreme = float(np.mean(np.abs(lt[sel] - lr[sel]) > math.log(1.5)))
        assert got["extreme_frac_tau1.5"] == pytest.approx(extreme, rel=1e-12)
        assert "ratio_segment_mean" not in got  # a bin cuts turns: no sequence metric


def test_granularity_says_which_mean_each_metric_is(store: Path, tails_run: list[dict]) -> None:
    doc = json.loads(cli("report", "t", "--json", "-", "-q").out)
    gran = doc["granularity"]
    assert gran["vllm_kl"] == gran["vllm_kl_clamped"] == gran["extreme_frac_tau2"] == "token-mean"
    assert gran["vllm_kl_seq_mean"] == gran["ratio_segment_mean"] == "sequence-mean"
    assert gran["tokens"] == "count" and gran["kl_share"] == "bin"
    metric_keys = {k for g in doc["groups"] for k in g["metrics"]}
    assert metric_keys == set(gran)
    assert doc["tails"] == {"clamp": 10.0, "tau": 2.0, "is_bounds": [0.5, 2.0]}


def test_compare_takes_the_thresholds(store: Path, tails_run: list[dict], tmp_path: Path) -> None:
    ran = cli(
        "compare", "t@steps=0", "t@steps=1..2", "--json", "-", "-q", "--resamples", "20", *ARGS
    )
    assert ran.code == 0, ran.err
    assert '"extreme_frac_tau1.5"' in ran.out and '"extreme_frac_tau2"' not in ran.out
    doc = json.loads(ran.out)
    assert doc["tails"] == {"clamp": 3.0, "tau": 1.5, "is_bounds": [0.8, 1.25]}
    assert doc["granularity"]["ratio_segment_mean"] == "sequence-mean"


@pytest.mark.parametrize(
    ("args", "found"),
    [
        (("--tau", "0.5"), "--tau: tau must be a ratio above 1 (found 0.5)"),
        (("--clamp", "-1"), "--clamp: the clamp must be a positive number (found -1.0)"),
        (("--is-bounds", "2_0.5"), "--is-bounds: the bounds must satisfy 0 < lower < upper"),
        (("--is-bounds", "low_high"), "--is-bounds: `low_high` is not LOWER_UPPER"),
    ],
)
def test_bad_thresholds_are_usage_errors(
    store: Path, tails_run: list[dict], args: tuple[str, ...], found: str
) -> None:
    ran = cli("report", "t", "-q", *args)
    assert ran.code == 1, ran.err
    assert ran.err.startswith(f"Error: {found}") and "Hint:" in ran.err
