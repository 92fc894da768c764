"""diagnose on faults confined to one gpu generation, and on faults beside a hot gpu: the cause
is the hardware when every code-path finding lies on that gpu (alone, with other dimensions, or
as elevated steps that are the gpu's), a code path when a part of the run is hot on every gpu;
and faults of most gpus against one (no gpu stands out from the median of the others).

The dumps are tests/planted.py's, with the mismatch of chosen tokens scaled afterwards as the
planted causes scale theirs: the trainer side is ``lr * exp(sigma * eps)``, and ``sigma`` times
``sqrt(f)`` multiplies a token's K3 by about ``f``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import api
from tests.planted import Plan, spike_steps, write_scaled

PER_STEP = 32
Scale = Callable[[dict, np.ndarray], np.ndarray]  # (row, model tokens' KV positions) -> factor


def _on(gpu: str, factor: float, when: Callable[[dict, np.ndarray], np.ndarray]) -> Scale:
    def scale(row: dict, kv: np.ndarray) -> np.ndarray:
        hit = when(row, kv) if row["gpu"] == gpu else np.zeros(len(kv), bool)
        return np.where(hit, factor, 1.0)

    return scale


def _everywhere(row: dict, kv: np.ndarray) -> np.ndarray:
    return np.ones(len(kv), bool)


RUNS: dict[str, tuple[Plan, Scale]] = {
    # A100 at 20x its mismatch from step 12 on: the run's steps change there, on A100 only
    "gpu-grows": (
        Plan("clean", per_step=PER_STEP, seed=31),
        _on("A100", 20.0, lambda row, kv: np.full(len(kv), row["step"] >= 12)),
    ),
    # A100 at 30x on its tokens at KV positions >= 32 (a long-context kernel of one gpu)
    "gpu-long": (
        Plan("clean", per_step=PER_STEP, seed=32),
        _on("A100", 30.0, lambda row, kv: kv >= 32),
    ),
    # spikes on every gpu (1000x in two steps) beside an A100 at 10x everywhere
    "spikes-and-gpu": (
        Plan("spike", per_step=PER_STEP, seed=33, factor=1000),
        _on("A100", 10.0, _everywhere),
    ),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gpu")
    for name, (plan, scale) in RUNS.items():
        path = write_scaled(plan, root / f"{name}.parquet", scale)
        mismatchctl.ingest([path], run=name, store=root / "store")
    return root / "store"


def _checks(store: Path, run: str) -> dict:
    return {c.name: c for c in api.diagnose(run, store=store).checks}


def test_a_gpu_whose_fault_grows_is_the_hardware_not_a_step_change(store: Path) -> None:
    checks = _checks(store, "gpu-grows")
    steps = [c for c in ("regimes", "spikes") if checks[c].verdict in ("warn", "fail")]
    assert steps, "the whole run's steps change at step 12"
    (run,) = checks[steps[0]].evidence["runs"].values()
    assert {int(s) for s in run["elevated_steps"]} >= set(range(14, 24))
    cause = checks["cause"]
    assert cause.evidence["key"] == "hardware" and "A100" in cause.finding
    assert "gpu generations" in cause.next and "importance" not in cause.next


def test_a_long_context_fault_of_one_gpu_is_the_hardware(store: Path) -> None:
    checks = _checks(store, "gpu-long")
    local = checks["localized"]
    assert local.verdict in ("warn", "fail")
    (run,) = local.evidence["runs"].values()
    first = run["code_path_findings"][0]  # the search's largest specific excess
    assert first["where"] == {"kv_position": "32-127", "gpu": "A100"}
    assert 20 < first["rate_ratio"] < 45
    assert "one gpu generation's tokens" in local.next
    cause = checks["cause"]
    assert cause.evidence["key"] == "hardware" and "gpu generations" in cause.next


def test_spikes_on_every_gpu_stay_a_code_path_beside_a_hot_gpu(store: Path) -> None:
    checks = _checks(store, "spikes-and-gpu")
    assert checks["hardware"].verdict in ("warn", "fail")  # A100 at 10x: seen
    spikes = checks["spikes"]
    assert spikes.verdict in ("warn", "fail")
    (run,) = spikes.evidence["runs"].values()
    assert {int(s) for s in run["elevated_steps"]} == set(spike_steps(24))
    # two faults: the hot gpu carries most of the excess and is named; the spikes on every gpu
    # are a second cause (they do not follow the gpu)
    cause = checks["cause"]
    assert cause.evidence["key"] == "hardware"
    assert [a["key"] for a in cause.evidence["also"]] == ["code_path"]
    assert "importance sampling would only reweight" in cause.evidence["also"][0]["next"]


FOUR = ("A100", "L20", "A10", "H20")


def _four_gpus(row: dict) -> str:  # responses dealt to four gpu generations in turn
    return FOUR[int(row["uid"].split("-")[1]) % len(FOUR)]


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three of four gpu generations at 3x (a kernel fault off Hopper), and a healthy run."""
    root = tmp_path_factory.mktemp("four")
    hot = {"A100", "L20", "A10"}
    for name, factor in (("three-hot", 3.0), ("four-healthy", 1.0)):

        def scale(row: dict, kv: np.ndarray, factor: float = factor) -> np.ndarray:
            return np.full(len(kv), factor if _four_gpus(row) in hot else 1.0)

        path = write_scaled(
            Plan("clean", per_step=PER_STEP, seed=41), root / f"{name}.parquet", scale
        )
        table = pq.read_table(path)
        rows = table.to_pylist()
        for row in rows:
            row["gpu"] = _four_gpus(row)
        pq.write_table(table.from_pylist(rows, schema=table.schema), path)
        mismatchctl.ingest([path], run=name, store=root / "store")
    return root / "store"


def test_most_gpus_hot_against_one_is_the_hardware(four: Path) -> None:
    """Each hot gpu is at the median of the others: the hottest against the rest sees nothing;
    the hot group against the cold gpu does."""
    checks = _checks(four, "three-hot")
    hardware = checks["hardware"]
    assert hardware.verdict == "warn"
    assert set(hardware.evidence["hot_gpus"]) == {"A100", "L20", "A10"}
    assert max(hardware.evidence["factor_over_others_median"].values()) < 1.75
    lo, hi = hardware.evidence["rate_ratio_vs_rest_ci"]
    assert 2.0 < lo < 3.0 < hi < 4.5
    assert "that of H20" in hardware.finding
    assert checks["cause"].evidence["key"] == "hardware"


def test_four_healthy_gpus_raise_no_alarm(four: Path) -> None:
    checks = _checks(four, "four-healthy")
    assert checks["hardware"].verdict == "ok" and "hot_gpus" not in checks["hardware"].evidence
    assert checks["cause"].evidence["key"] == "none"


@pytest.fixture(scope="module")
def one_gpu_each(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs all on one gpu: a baseline on H20, targets on A100 at 3x and at the same level."""
    root = tmp_path_factory.mktemp("one-gpu-each")
    for name, seed, gpu, factor in (
        ("base-h20", 43, "H20", 1.0),
        ("a100-3x", 44, "A100", 3.0),
        ("a100-same", 45, "A100", 1.0),
        ("h20-3x", 46, "H20", 3.0),
    ):
        path = write_scaled(
            Plan("clean", per_step=PER_STEP, seed=seed),
            root / f"{name}.parquet",
            lambda row, kv, factor=factor: np.full(len(kv), factor),
        )
        table = pq.read_table(path)
        rows = table.to_pylist()
        for row in rows:
            row["gpu"] = gpu
        pq.write_table(table.from_pylist(rows, schema=table.schema), path)
        mismatchctl.ingest([path], run=name, store=root / "store")
    return root / "store"


def _against(store: Path, run: str, baseline: str) -> dict:
    return {c.name: c for c in api.diagnose(run, store=store, baseline=baseline).checks}


def test_a_uniform_excess_over_a_baseline_on_other_gpus_names_the_gpus(one_gpu_each: Path) -> None:
    checks = _against(one_gpu_each, "a100-3x", "base-h20")
    assert checks["baseline"].verdict in ("warn", "fail")
    assert checks["baseline"].evidence["excess_shape"] == "uniform"
    cause = checks["cause"]
    assert cause.evidence["key"] == "hardware"
    assert "the run ran on A100, the baseline on H20" in cause.next
    assert "policy mismatch" in cause.next  # the data cannot tell them apart: said
    assert "while the baseline ran on H20" in checks["baseline"].next


def test_the_same_excess_on_the_same_gpu_is_not_the_hardware(one_gpu_each: Path) -> None:
    """The same uniform excess (each token's logits perturbed on its own) on the baseline's gpu:
    a less exact path, not another gpu generation."""
    checks = _against(one_gpu_each, "h20-3x", "base-h20")
    assert checks["cause"].evidence["key"] == "precision"


def test_another_gpu_at_the_baseline_level_raises_no_alarm(one_gpu_each: Path) -> None:
    checks = _against(one_gpu_each, "a100-same", "base-h20")
    assert checks["baseline"].verdict == "ok"
    assert checks["cause"].evidence["key"] == "none"
