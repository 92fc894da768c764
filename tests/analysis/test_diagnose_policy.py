"""diagnose on another policy without a weight version: the signs of r lean one way along whole
responses (``policy_signs``; ``stats/sign_coherence.py``).

On the bundled sample runs (a real tiny model's numerics): `stale-subtle`, one optimizer step
behind with no version column and a `weight_lag=0` tag, was named only against a baseline; now it is named
the policy on its own. The healthy pair, the improvement and the kernel faults stay quiet.
Planted: a per-response shift of the trainer's logprobs (``u_i |lr|``, u_i ~ N(0, a^2)) on top
of tests/planted.py's independent noise is named the policy; the independent noise alone, or
ten times larger, is not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl.sample_runs import ingest_demo, load_manifest
from mismatchctl.store import open_store
from tests.helpers import slow_param
from tests.planted import Plan, write
from tests.planted import checks as diagnosed

SAMPLE_RUNS = ("ref", "ref-b", "improved", "stale-subtle", "faulty-attn-subtle")
ALARM = ("warn", "fail")


@pytest.fixture(scope="module")
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


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("leaning")
    for name, seed, lean, cause in (
        ("lean-1", 1, 0.02, "clean"), ("lean-2", 2, 0.02, "clean"), ("even", 3, 0.0, "clean"),
        ("lean-spikes", 5, 0.02, "spike"),
    ):  # fmt: skip
        path = _leaning(root / f"{name}.parquet", seed, lean, cause)
        mismatchctl.ingest([path], run=name, store=root / "store")
    loud = write(Plan("improved", per_step=32, seed=4, factor=None), root / "loud.parquet")
    mismatchctl.ingest([loud], run="loud", store=root / "store")
    return root / "store"


@pytest.mark.parametrize("baseline", [None, "ref-b"])
def test_a_run_one_step_behind_is_named_the_policy(samples: Path, baseline: str | None) -> None:
    checks = diagnosed(samples, "stale-subtle", baseline)
    signs = checks["policy_signs"]
    assert signs.verdict in ALARM
    assert signs.evidence["dispersion"] > 2 and signs.evidence["p_value"] < 1e-20
    assert checks["staleness"].verdict == "ok"  # no version column; its tag says weight_lag=0
    cause = checks["cause"]
    assert cause.evidence["key"] == "policy" and "policy_signs" in cause.evidence["checks"]
    assert "weight versions" in cause.next
    if baseline:  # the baseline check sees the excess too, and the cause keeps it
        assert "baseline" in cause.evidence["checks"]


@pytest.mark.parametrize(
    "run", ["ref", "faulty-attn-subtle", slow_param("ref-b"), slow_param("improved")]
)
def test_numeric_mismatch_does_not_lean(samples: Path, run: str) -> None:
    signs = diagnosed(samples, run)["policy_signs"]
    assert signs.verdict == "ok"
    assert signs.evidence["dispersion"] < 1.3


@pytest.mark.parametrize("run", ["lean-1", "lean-2"])
def test_planted_leaning_responses_are_the_policy(planted: Path, run: str) -> None:
    checks = diagnosed(planted, run)
    assert checks["policy_signs"].verdict in ALARM
    assert checks["cause"].evidence["key"] == "policy"


@pytest.mark.parametrize("run", ["even", "loud"])
def test_independent_noise_is_not_a_policy(planted: Path, run: str) -> None:
    signs = diagnosed(planted, run)["policy_signs"]
    assert signs.verdict == "ok" and signs.evidence["dispersion"] < 1.2


def test_a_code_path_comes_before_leaning_responses(planted: Path) -> None:
    """Two steps at 225x and responses that lean: the code path is named (a biased kernel can
    make the responses it hits lean too, as the sample spiky-6's faulty step 3 does: 2.5x on
    its own), the policy_signs check still warns beside it."""
    checks = diagnosed(planted, "lean-spikes")
    signs = checks["policy_signs"]
    assert signs.verdict in ALARM
    assert "or a biased kernel" in signs.finding and signs.next.startswith("fix the code path")
    assert checks["cause"].evidence["key"] == "code_path"
