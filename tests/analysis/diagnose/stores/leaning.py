"""diagnose on another policy without a weight version: the signs of r lean one way along whole
responses (``policy_signs``; ``stats/sign_coherence.py``).

On the bundled sample runs (a real tiny model's numerics): `stale-subtle`, one optimizer step
behind with no version column and a `weight_lag=0` tag, was named only against a baseline; now it is named
the policy on its own. The healthy pair, the improvement and the kernel faults stay quiet.
Planted: a per-response shift of the trainer's logprobs (``u_i |lr|``, u_i ~ N(0, a^2)) on top
of tests/planted.py's independent noise is named the policy; the independent noise alone, or
ten times larger, is not. ``lean-faint`` leans 1.65x, between the gate over a baseline the run
exceeds and the gate alone (``policy_signs.Thresholds``); ``quieter`` is the independent noise
at 0.7 sigma, a baseline it exceeds 2.1x."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl.sample_runs import ingest_demo, load_manifest
from mismatchctl.store import open_store
from tests.planted import Plan, write

SAMPLE_RUNS = ("ref", "ref-b", "improved", "stale-subtle", "faulty-attn-subtle")


ALARM = ("warn", "fail")


def samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("policy") / "store"
    ingest_demo(open_store(path), [r for r in load_manifest() if r.name in SAMPLE_RUNS])
    return path


def _leaning(path: Path, seed: int, lean: float, cause: str = "clean") -> Path:
    """A planted run (healthy, or with ``cause`` at its default size) whose responses each lean
    one way: every model token's trainer logprob moved by ``u |lr|`` with one
    ``u ~ N(0, lean^2)`` per response."""
    write(Plan(cause, per_step=32, seed=seed), path, weight_version=False)
    table = pq.read_table(path)
    rng = np.random.default_rng(seed + 1000)
    rows = table.to_pylist()
    for row in rows:
        mask = np.asarray(row["response_mask"]) == 1
        lr, lt = np.asarray(row["rollout_log_probs"]), np.asarray(row["old_log_probs"])
        u = rng.normal(0.0, lean)
        lt[mask] = np.minimum(lt[mask] + u * np.abs(lr[mask]), 0.0)
        row["old_log_probs"] = lt.tolist()
    pq.write_table(table.from_pylist(rows, schema=table.schema), path)
    return path


def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("leaning")
    for name, seed, lean, cause in (
        ("lean-1", 1, 0.02, "clean"), ("lean-2", 2, 0.02, "clean"), ("even", 3, 0.0, "clean"),
        ("lean-spikes", 5, 0.02, "spike"), ("lean-faint", 11, 0.003, "clean"),
        ("quieter", 5, 0.0, "improved"),
    ):  # fmt: skip
        path = _leaning(root / f"{name}.parquet", seed, lean, cause)
        mismatchctl.ingest([path], run=name, store=root / "store")
    loud = write(Plan("improved", per_step=32, seed=4, factor=None), root / "loud.parquet")
    mismatchctl.ingest([loud], run="loud", store=root / "store")
    return root / "store"
