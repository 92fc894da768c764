"""`mismatchctl certify`: a run whose two sides are equal passes (exit 0); a run with mismatch
fails (exit 3) with every share, the first divergence of each sequence, the earliest ones and the
largest |r| against numpy on the dumps' own arrays; tolerance; errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import api
from mismatchctl.errors import UsageError
from tests.analysis.tokens.tokens_data import tokens_dump
from tests.helpers import cli


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("certify")
    files = [tokens_dump(root / f"d{i}.parquet", seed=20 + i) for i in range(2)]
    mismatchctl.ingest(files, run="real", store=root / "store")
    t = pq.read_table(files[0])
    equal = t.set_column(t.schema.get_field_index("old_log_probs"), "old_log_probs",
                         t.column("rollout_log_probs"))  # fmt: skip
    pq.write_table(equal, root / "equal.parquet")
    mismatchctl.ingest([root / "equal.parquet"], run="equal", store=root / "store")
    return root / "store"


def _sequences(store: Path) -> list[dict]:
    """Every response of the `real` dumps, in ingest order, with its model tokens' arrays."""
    out = []
    for i in range(2):
        for row in pq.read_table(store.parent / f"d{i}.parquet").to_pylist():
            m = np.flatnonzero(row["response_mask"])
            lr, lt = np.array(row["rollout_log_probs"])[m], np.array(row["old_log_probs"])[m]
            out.append({**row, "model": m, "lr": lr, "lt": lt})
    return out


def test_equal_sides_pass(store: Path) -> None:
    c = api.certify("equal", store=store)
    assert c.holds
    d = c.to_dict()["certify"]
    assert d["equal_token_share"] == 1.0 and d["equal_sequence_share"] == 1.0
    assert d["first_divergence"] is None and d["max_abs_log_ratio"] == 0.0
    ran = cli("certify", "equal", "--store", str(store), "-q")
    assert ran.code == 0 and "HOLDS" in ran.out


@pytest.mark.parametrize("tolerance", [0.0, 0.05, 0.3])
def test_a_real_run_fails_with_its_first_divergences(store: Path, tolerance: float) -> None:
    rows = _sequences(store)
    c = api.certify("real", tolerance=tolerance, store=store)
    d = c.to_dict()["certify"]
    r = np.concatenate([x["lt"] - x["lr"] for x in rows])
    assert d["tokens"] == len(r)
    assert d["equal_tokens"] == int(np.sum(np.concatenate([x["lt"] == x["lr"] for x in rows])))
    assert d["within_tolerance_tokens"] == int(np.sum(np.abs(r) <= tolerance))
    first = {}
    for x in rows:
        div = np.flatnonzero(np.abs(x["lt"] - x["lr"]) > tolerance)
        if len(div):
            first[x["uid"]] = (int(x["model"][div[0]]), x, div[0])
    assert d["sequences"] == len(rows) and d["equal_sequences"] == len(rows) - len(first)
    assert not c.holds and first
    # the distribution of first divergent positions, in log2 bins
    hist: dict[int, int] = {}
    for pos, _, _ in first.values():
        lo = 0 if pos == 0 else 1 << (pos.bit_length() - 1)
        hist[lo] = hist.get(lo, 0) + 1
    assert {b["from"]: b["sequences"] for b in d["first_divergent_position"]} == hist
    # the earliest: by first position, then step, then seq (ingest order of the responses)
    order = {x["uid"]: k for k, x in enumerate(rows)}
    expected = sorted(first, key=lambda u: (first[u][0], first[u][1]["step"], order[u]))[:10]
    got = d["earliest_divergences"]
    assert [e["sample_id"] for e in got] == expected
    for e in got:
        pos, x, j = first[e["sample_id"]]
        assert e["position"] == pos and e["token_id"] == x["responses"][pos]
        assert e["rollout_logprob"] == x["lr"][j] and e["trainer_logprob"] == x["lt"][j]
        assert e["kv_position"] == (
            None if x["prompt_length"] is None else x["prompt_length"] + pos
        )
    # the first divergence in step order: the earliest step, then the first sequence of it
    step_first = min(first, key=lambda u: (first[u][1]["step"], order[u]))
    assert d["first_divergence"]["sample_id"] == step_first
    assert d["first_divergence"]["position"] == first[step_first][0]
    assert d["max_abs_log_ratio"] == pytest.approx(np.abs(r).max(), rel=1e-15)


def test_cli_exit_code_json_and_polars(store: Path) -> None:
    ran = cli("certify", "real", "--store", str(store), "-q")
    assert ran.code == 3 and "FAILS" in ran.out and "Earliest divergences" in ran.out
    ran = cli("certify", "real", "--store", str(store), "--json", "-", "-q", "--tolerance", "10")
    assert ran.code == 0 and json.loads(ran.out)["certify"]["holds"] is True
    df = api.certify("real", store=store).to_polars()
    assert df.height == 10 and "position" in df.columns


@pytest.mark.parametrize("tolerance", [-1.0, float("nan"), float("inf")])
def test_bad_tolerance(store: Path, tolerance: float) -> None:
    with pytest.raises(UsageError, match="--tolerance"):
        api.certify("real", tolerance=tolerance, store=store)


def test_equal_values_are_compared_as_stored(tmp_path: Path) -> None:
    """float32 dumps: equal float32 values stay equal (no rounding makes them differ)."""
    lr = np.float32([-0.1, -2.5, -0.75])
    table = pa.table({
        "step": pa.array([0], pa.int64()), "uid": ["x"],
        "response_mask": pa.array([[1, 1, 1]], pa.list_(pa.int8())),
        "rollout_log_probs": pa.array([lr.tolist()], pa.list_(pa.float32())),
        "old_log_probs": pa.array([lr.tolist()], pa.list_(pa.float32())),
    })  # fmt: skip
    pq.write_table(table, tmp_path / "f.parquet")
    mismatchctl.ingest([tmp_path / "f.parquet"], run="f", store=tmp_path / "store")
    assert api.certify("f", store=tmp_path / "store").holds
