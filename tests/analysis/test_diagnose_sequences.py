"""diagnose on a fault of some requests that no column names: one sequence in eight (by a hash
of its sample id: an inference replica of eight) with its mismatch 3x or 10x. It was passed
without a baseline and named a uniform policy mismatch with one; the hot_sequences check finds
the sequences hotter than the others of their step, and the cause is "sequences". Healthy and
improved runs, and faults the other checks name (a gpu, the tool turns, a step), leave it quiet.

The dumps are tests/planted.py's runs, scaled with ``write_scaled``."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl.analysis.diagnose.checks.hot_sequences import T
from tests.helpers import slow_param
from tests.planted import Plan, checks, write, write_scaled

ALARM = ("warn", "fail")


def _replica(factor: float):
    def scale(row: dict, kv: np.ndarray) -> np.ndarray:
        return np.full(len(kv), factor if zlib.crc32(row["uid"].encode()) % 8 == 0 else 1.0)

    return scale


SCALED = {"some-3x": (1, 3.0), "some-10x": (2, 10.0), "healthy": (3, 1.0), "base": (99, 1.0)}
PLANTED = {"gpu-3x": Plan("gpu", per_step=32, seed=1, factor=3.0),
           "tool-3x": Plan("tool", per_step=32, seed=1, factor=3.0),
           "spike-10x": Plan("spike", per_step=32, seed=1, factor=10.0),
           "improved": Plan("improved", per_step=32, seed=1)}  # fmt: skip


SOURCES = ("gsm8k", "math", "code", "search")


def _source(row: dict) -> str:
    return SOURCES[zlib.crc32(row["uid"].encode()) % 4]


def _with_sources(path: Path) -> None:
    """A per-sample ``data_source`` column (an attribute ingest keeps)."""
    table = pq.read_table(path)
    sources = pa.array([_source(row) for row in table.to_pylist()])
    pq.write_table(table.append_column("data_source", sources), path)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sequences")
    source = root / "source-3x.parquet"
    plan = Plan("clean", per_step=32, seed=1)
    write_scaled(
        plan, source, lambda row, kv: np.full(len(kv), 3.0 if _source(row) == "code" else 1.0)
    )
    _with_sources(source)
    mismatchctl.ingest([source], run="source-3x", store=root / "store")
    for name, (seed, factor) in SCALED.items():
        plan = Plan("clean", per_step=32, seed=seed)
        path = write_scaled(plan, root / f"{name}.parquet", _replica(factor))
        fleet = {"fleet": "b"} if name in ("some-3x", "healthy") else {}
        mismatchctl.ingest([path], run=name, store=root / "store", tags=fleet)
    for name, plan in PLANTED.items():
        path = write(plan, root / f"{name}.parquet", weight_version=False)
        mismatchctl.ingest([path], run=name, store=root / "store")
    return root / "store"


def _checks(store: Path, run: str, baseline: str | None = None) -> dict:
    return checks(store, run, baseline)  # diagnosed once: several tests read the same runs


@pytest.mark.parametrize("run", ["some-3x", slow_param("some-10x")])
@pytest.mark.parametrize("baseline", [None, "base"])
def test_some_hot_requests_are_named(store: Path, run: str, baseline: str | None) -> None:
    checks = _checks(store, run, baseline)
    hot = checks["hot_sequences"]
    assert hot.verdict in ALARM
    assert hot.evidence["hot"] >= 4 * max(hot.evidence["cold"], 1)
    factor = 3.0 if run == "some-3x" else 10.0
    assert factor / 1.5 < hot.evidence["rate_ratio"] < factor * 1.5
    examples = hot.evidence["examples"]
    assert examples and all(e["z"] > 3 for e in examples)
    assert all(zlib.crc32(e["sample_id"].encode()) % 8 == 0 for e in examples)  # planted ones
    top = examples[0]
    assert f"mismatchctl show {run} {top['sample_id']} --step {top['step']}" in hot.next
    cause = checks["cause"]
    assert cause.evidence["key"] == "sequences", cause.finding
    assert "replica" in cause.next and "weight version" in cause.next


@pytest.mark.parametrize(
    "run", ["healthy", "tool-3x", *(slow_param(r) for r in ("improved", "gpu-3x", "spike-10x"))]
)
def test_no_hot_sequences_where_no_request_is_singled_out(store: Path, run: str) -> None:
    checks = _checks(store, run)
    assert checks["hot_sequences"].verdict == "ok", checks["hot_sequences"].finding
    assert checks["cause"].evidence["key"] != "sequences"


def test_hot_requests_of_one_data_source_are_named_by_it(store: Path) -> None:
    """The samples of one data source at 3x: the localized check names them
    (``attr:data_source code``), the cause is a code path of those samples with advice about
    what they take that the others do not (not an attention kernel every request takes), and
    the hot_sequences check points at that part."""
    checks = _checks(store, "source-3x")
    local, cause, hot = checks["localized"], checks["cause"], checks["hot_sequences"]
    assert local.verdict in ALARM
    (run,) = local.evidence["runs"].values()
    assert run["code_path_findings"][0]["where"] == {"attr:data_source": "code"}
    assert cause.evidence["key"] == "code_path"
    assert cause.evidence["variant"] == "the samples with data_source code"
    assert "--where attr:data_source=code" in cause.next and "attention" not in cause.next
    assert local.next == cause.next
    assert hot.verdict in ALARM and "the localized check names a part" in hot.next


def test_a_selection_of_runs_is_judged_run_by_run(store: Path) -> None:
    """Two runs selected by a tag, one with hot requests: the check names that run (over both
    runs together the hot ones would be half the share)."""
    hot = _checks(store, "fleet=b")["hot_sequences"]
    assert hot.verdict in ALARM
    assert hot.evidence["run"] == "some-3x" and hot.finding.startswith("some-3x: ")
    runs = hot.evidence["runs"]
    assert set(runs) == {"some-3x", "healthy"}
    alone = _checks(store, "some-3x")["hot_sequences"].evidence
    assert runs["some-3x"] == {k: v for k, v in alone.items()}
    assert runs["healthy"]["hot"] < T.SEQ_HOT_MIN
