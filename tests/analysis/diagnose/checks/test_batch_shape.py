"""The batch-shape test (``stats/batch_shape.py``) and its diagnose check: planted runs whose
sequences are labelled with their micro-batch (``batch_id`` per response), with and without a
mismatch that depends on the batch size; the rate ratios against an exact reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl.analysis.diagnose.check import evidence_of
from mismatchctl.analysis.diagnose.checks import batch_shape as batch_shape_check
from mismatchctl.stats.batch_shape import batch_shape
from mismatchctl.stats.seq_sums import RunSeqSums
from tests.planted import Plan, write
from tests.planted import checks as diagnosed


def _batched(path: Path, small_factor: float, seed: int = 4) -> Path:
    """A planted clean run of 32 responses a step in micro-batches of 8 (the first 24) and of 4
    (the last 8); the small batches' noise scaled by ``sqrt(small_factor)`` (their K3 by about
    ``small_factor``), as a kernel whose reduction depends on the batch size would."""
    write(Plan("clean", per_step=32, seed=seed), path, weight_version=False)
    table = pq.read_table(path)
    rows = table.to_pylist()
    ids = []
    for k, row in enumerate(rows):
        i = k % 32
        small = i >= 24
        ids.append(100 + (i - 24) // 4 if small else i // 8)
        if small:
            mask = np.asarray(row["response_mask"]) == 1
            lr, lt = np.asarray(row["rollout_log_probs"]), np.asarray(row["old_log_probs"])
            r = lt[mask] - lr[mask]
            lt[mask] = np.minimum(lr[mask] + r * np.sqrt(small_factor), 0.0)
            row["old_log_probs"] = lt.tolist()
    out = table.from_pylist(rows, schema=table.schema)
    pq.write_table(out.append_column("batch_id", pa.array(ids, pa.int64())), path)
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("batch")
    for name, factor in (("same", 1.0), ("variant", 4.0)):
        mismatchctl.ingest([_batched(root / f"{name}.parquet", factor)], run=name, store=root / "s")
    write(Plan("clean", per_step=32, seed=4), root / "plain.parquet", weight_version=False)
    mismatchctl.ingest([root / "plain.parquet"], run="plain", store=root / "s")
    return root / "s"


def test_a_batch_variant_mismatch_fails_and_a_batch_invariant_one_passes(store: Path) -> None:
    same = diagnosed(store, "same")["batch_shape"]
    variant = diagnosed(store, "variant")["batch_shape"]
    assert same.verdict == "ok", same.finding
    assert variant.verdict == "fail", variant.finding
    assert "batch size 4's tokens carry" in variant.finding
    found = evidence_of(variant, batch_shape_check.Evidence)
    assert found is not None
    run = found.runs["variant"]
    assert run.high == 4 and run.low == 8 and run.interval is not None and run.interval[0] > 3.0
    assert found.to_dict()["runs"]["variant"] == run.to_dict()  # the JSON as the result writes it
    assert variant.next and "batch-invariant" in variant.next


def test_without_batch_sizes_the_check_does_not_apply(store: Path) -> None:
    plain = diagnosed(store, "plain")["batch_shape"]
    assert plain.verdict == "n/a" and "no batch sizes" in plain.finding


def test_rate_ratios_equal_a_direct_computation() -> None:
    """Two steps, sizes 2 and 3, two probability bins: each size's observed K3 over its tokens
    priced at its step's per-bin rates (over both sizes)."""
    rng = np.random.default_rng(0)
    n = 600
    step = np.repeat([0, 1], n // 2)
    size = np.where(np.arange(n) % 5 < 2, 2, 3)
    bins = rng.integers(20, 40, (n, 2)).astype(float)
    k3_bins = bins * rng.uniform(1e-4, 3e-4, (n, 2)) * np.where(size == 2, 2.0, 1.0)[:, None]
    sums = RunSeqSums(step, bins.sum(1), np.zeros(n), k3_bins.sum(1), size, bins, k3_bins)
    res = batch_shape(sums)
    ratios = {}
    for b in (2, 3):
        observed = expected = 0.0
        for s in (0, 1):
            at = step == s
            rate = k3_bins[at].sum(0) / bins[at].sum(0)
            m = at & (size == b)
            observed += k3_bins[m].sum()
            expected += (bins[m] * rate).sum()
        ratios[b] = observed / expected
    assert {s.batch_size: s.ratio for s in res.sizes} == pytest.approx(ratios, rel=1e-12)
    assert res.spread == pytest.approx(ratios[2] / ratios[3], rel=1e-12)
    assert res.high == 2 and res.low == 3 and res.steps == 2
    assert res.interval[0] < res.spread < res.interval[1]
