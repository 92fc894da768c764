"""whatif through the CLI and the API: the golden vector by hand, groups, the batch filter per
batch, sweeps, errors, JSON and HTML."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from plotly.offline import get_plotlyjs

import mismatchctl
from mismatchctl import api
from mismatchctl.render.html import page_json_blocks
from mismatchctl.stats.whatif import METHODS
from tests.helpers import FIXTURES, cli
from tests.planted import SPIKE_STEPS, Plan, write


@pytest.fixture
def golden(store: Path) -> None:
    mismatchctl.ingest([FIXTURES / "golden.parquet"], run="g", store=store)


def _doc(*args: str) -> dict:
    ran = cli("whatif", *args, "--json", "-", "-q")
    assert ran.code == 0, ran.err
    return json.loads(ran.out)


def _group(doc: dict, by: dict, method: str) -> dict:
    return next(
        g["metrics"] for g in doc["whatif"]["groups"] if g["by"] == by and g["method"] == method
    )


def test_golden_vector(golden: None) -> None:
    """r_A = [0, -0.1, 0.5], r_B = [0.2 | tool | 0]: S_A = 0.4, S_B = 0.2 (METRICS.md)."""
    doc = _doc("g", "--method", "seq-mis:1.4", "--method", "token-tis:1.5")
    assert doc["schema_version"] == 1 and doc["whatif"]["selection"] == "g"
    assert [m["threshold"] for m in doc["whatif"]["methods"]] == [1.4, 1.5]
    seq = _group(doc, {}, "seq-mis")
    assert (seq["units"], seq["tokens"], seq["sequences"]) == (2, 5, 2)
    assert (seq["sequence_fraction"], seq["token_fraction"]) == (0.5, 0.6)  # A: e^0.4 > 1.4
    assert seq["weight_mean"] == pytest.approx(math.exp(0.2) / 2, rel=1e-12)
    assert seq["ess"] == pytest.approx(0.5, rel=1e-12)
    tok = _group(doc, {}, "token-tis")
    assert tok["token_fraction"] == 0.2 and tok["weight_max"] == 1.5
    assert tok["ess"] == pytest.approx(0.9649969048511912, rel=1e-12)
    # B's second token comes after a tool response: B is a unit of both turn kinds
    first = _group(doc, {"turn_kind": "first"}, "seq-mis")
    later = _group(doc, {"turn_kind": "later"}, "seq-mis")
    assert (first["units"], first["tokens"], later["units"], later["tokens"]) == (2, 4, 1, 1)
    assert later["weight_mean"] == pytest.approx(math.exp(0.2), rel=1e-12)
    assert _group(doc, {"run": "g", "step": 0}, "seq-mis") == _group(doc, {"run": "g"}, "seq-mis")
    assert doc["whatif"]["batches"] == [
        {"run": "g", "step": 0, "vllm_kl": pytest.approx(0.0349923, abs=1e-7)}
    ]


@pytest.mark.parametrize(("threshold", "rejected"), [("0.03", 1.0), ("0.04", 0.0)])
def test_golden_batch_filter(golden: None, threshold: str, rejected: float) -> None:
    doc = _doc("g", "--method", "batch-filter", "--threshold", threshold)
    whole = _group(doc, {}, "batch-filter")
    assert whole["token_fraction"] == rejected and whole["sequence_fraction"] == rejected


def test_batch_filter_per_batch_and_sweep(store: Path, tmp_path: Path) -> None:
    mismatchctl.ingest([write(Plan("spike"), tmp_path / "s.parquet")], run="s", store=store)
    doc = _doc("s", "--method", "batch-filter", "--sweep", "0.05,1000")
    assert doc["whatif"]["sweep"] is True
    steps = [g for g in doc["whatif"]["groups"] if set(g["by"]) == {"run", "step"}]
    skipped = {
        g["by"]["step"]
        for g in steps
        if g["threshold"] == 0.05 and g["metrics"]["token_fraction"] == 1.0
    }
    assert skipped == set(SPIKE_STEPS)
    assert all(g["metrics"]["token_fraction"] == 0.0 for g in steps if g["threshold"] == 1000)
    batches = {b["step"]: b["vllm_kl"] for b in doc["whatif"]["batches"]}
    assert {s for s, kl in batches.items() if kl > 0.05} == set(SPIKE_STEPS)
    fractions = [_group(_doc("s", "-m", "seq-mis", "-t", t), {}, "seq-mis") for t in ("1.5", "3")]
    assert fractions[0]["sequence_fraction"] > fractions[1]["sequence_fraction"] > 0


def test_every_method_by_default_and_terminal(golden: None) -> None:
    w = api.whatif("g")
    assert [m.name for m in w.methods] == list(METHODS)
    assert [m.threshold for m in w.methods] == [i.default for i in METHODS.values()]
    sweep = api.whatif("g", methods="seq-mis", sweep=[1.2, 2])
    assert sweep.sweep and [m.threshold for m in sweep.methods] == [1.2, 2.0]
    ran = cli("whatif", "g", "-q")
    assert ran.code == 0
    for label in ("seq-mis 2", "geo-rs 0.999_1.001", "veto 0.0001", "batch-filter 0.1"):
        assert label in ran.out
    assert "By turn kind" in ran.out and "Per step" in ran.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-m", "seq-mis", "-m", "veto", "-t", "2"], "--threshold needs exactly one --method"),
        (["--sweep", "1,2"], "--sweep needs exactly one --method"),
        (["-m", "seq-mis", "-t", "2", "--sweep", "1,2"], "exclude each other"),
        (["-m", "seqmis"], "unknown method `seqmis`"),
        (["-m", "geo-rs:1.1"], "is not LOWER_UPPER"),
        (["-m", "k3-rs", "--sweep", ","], "names no threshold"),
    ],
)
def test_usage_errors(golden: None, args: list[str], message: str) -> None:
    ran = cli("whatif", "g", *args, "-q")
    assert ran.code == 1 and message in ran.err and "Hint:" in ran.err


def test_html(golden: None, tmp_path: Path) -> None:
    out = tmp_path / "w.html"
    ran = cli("whatif", "g", "-m", "seq-mis", "--sweep", "1.2,1.4,2", "--html", str(out), "-q")
    assert ran.code == 0 and f"Wrote {out}" in ran.err
    page = out.read_text()
    assert page.count(get_plotlyjs()) == 1 and "<script src" not in page
    sweep, steps = page_json_blocks(page)
    assert sweep["data"][0]["x"] == ["1.2", "1.4", "2"]
    # sequences rejected: A (e^0.4) and B (e^0.2 = 1.221) at 1.2, A at 1.4, none at 2
    assert sweep["data"][1]["y"] == [1.0, 0.5, 0.0]
    assert steps["data"][0]["x"] == [0]
    kinds = [
        s.kind for s in api.sections(api.whatif("g", methods=["seq-mis"])) if hasattr(s, "kind")
    ]
    assert kinds == ["whatif_methods", "whatif_steps"]


def test_method_threshold_and_sweep_conflict() -> None:
    from mismatchctl.analysis.whatif.whatif import parse_methods
    from mismatchctl.errors import UsageError

    with pytest.raises(UsageError) as err:
        parse_methods(["seq-mis:2"], sweep="1.5,2,3")
    assert err.value.message == "--method `seq-mis:2` names a threshold and --sweep gives others"
