"""diagnose on physical faults: runs of the calibration corpus (tests/data/calibration, a subset of
`sample_data/calibrate.py --size small`: a real tiny model's bf16 engine against its fp32 trainer,
each fault simulated where it happens), ingested without tags. The healthy runs raise no alarm,
each fault is named by its cause; the slow tier diagnoses every committed run alone and against
its baseline and checks docs/diagnose.md's table says the same."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mismatchctl import api
from tests.helpers import slow_param

ROOT = Path(__file__).parents[2]
CORPUS = ROOT / "tests" / "data" / "calibration"
DOC = ROOT / "docs" / "diagnose.md"


def _runs() -> dict[str, dict]:
    return {r["name"]: r for r in json.loads((CORPUS / "corpus.json").read_text())["runs"]}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("calibration") / "store"
    for name, run in _runs().items():
        options = run.get("ingest") or {}
        routes = None
        if options:
            routes = api.RouteOptions(
                top_k=options.get("routes_topk") or 0, num_experts=options.get("num_experts")
            )
        api.ingest([CORPUS / "runs" / name], name, store=root, routes=routes)
    return root


def _cause(store: Path, run: str, baseline: str | None = None) -> dict:
    return api.diagnose(run, baseline=baseline, store=store).section_dict()


@pytest.mark.parametrize("run", ["h-a", "h-moe-a", "h-moe-r3-a"])
def test_healthy_runs_raise_no_alarm(store: Path, run: str) -> None:
    """A healthy dense run, a healthy MoE whose routes flip as bf16 numerics make them flip
    (the flips carry most of its K3: normal, not a fault) and a MoE with replay, no tag."""
    found = _cause(store, run)
    assert found["verdict"] == "ok", [c["name"] for c in found["checks"] if c["verdict"] != "ok"]
    assert found["cause"]["key"] == "none"


def test_a_penalty_in_the_engines_logprobs_is_named_a_logit_processor(store: Path) -> None:
    """A repetition penalty of 1.01 in the engine's processed logprobs (2.8x a healthy run):
    the tokens seen before in their response are shifted, the others are not."""
    cause = _cause(store, "sem-rep-subtle")["cause"]
    assert cause["key"] == "semantics" and "logit processor" in cause["variant"]
    assert "penalty" in cause["next"] and "token_shift" in cause["checks"]
    assert cause["correction"].startswith("no")


def test_routes_captured_late_are_a_capture_bug_and_replay_is_not_advised(store: Path) -> None:
    """Routes dumped one position late: they disagree on most tokens while the logprobs are
    those of replay; never advise replaying them."""
    found = _cause(store, "moe-capture-shift")
    cause = found["cause"]
    assert cause["key"] == "routing_capture" and found["verdict"] == "fail"
    assert "do not enable or trust routing replay" in cause["next"]
    flips = next(c for c in found["checks"] if c["name"] == "routing_flips")
    assert flips["verdict"] == "ok" and "R3" not in (flips["next"] or "")


def test_a_split_kv_path_of_one_gpu_is_that_hardware(store: Path) -> None:
    """One replica of four (L20) takes a faulty split-KV path at long KV: the part is long KV
    positions, and within it the L20's tokens alone."""
    cause = _cause(store, "hw-l20-splitkv-subtle")["cause"]
    assert cause["key"] == "hardware" and "L20" in cause["where"]
    runner = {r["key"]: r for r in cause["runner_ups"]}
    assert "gpu L20" in " ".join(runner["code_path"]["against"])


def test_a_stale_policy_under_a_louder_split_kv_path_is_named_second(store: Path) -> None:
    """Weights one optimizer step behind under a split-KV merge bug 100x louder: the path holds
    the K3 and its bias leans the responses it reaches, so the run's lean is no evidence; the
    first turns, where the long-KV path does not reach, lean on their own: the policy second."""
    cause = _cause(store, "combo-stale-splitkv")["cause"]
    assert cause["key"] == "code_path" and "kv_position" in cause["where"]
    (also,) = cause["also"]
    assert also["key"] == "policy" and also["where"] == "the first turns"
    assert also["checks"] == ["policy_signs"] and "outside the named part" in also["because"]
    assert "policy" not in {r["key"] for r in cause["runner_ups"]}


def test_a_fleet_wide_fp8_cache_under_one_gpus_fault_needs_the_baseline(store: Path) -> None:
    """An fp8 KV cache on every gpu and a split-KV bug 1000x louder on the L20: alone, the
    hardware only (a uniform loss is a level without a baseline; the other gpus' responses do
    not lean); against a healthy run of the same gpus, their excess is the precision."""
    alone = _cause(store, "combo-fp8kv-gpu")["cause"]
    assert alone["key"] == "hardware" and "L20" in alone["where"] and alone["also"] == []
    cause = _cause(store, "combo-fp8kv-gpu", "h-gpus")["cause"]
    assert cause["key"] == "hardware"
    (also,) = cause["also"]
    assert also["key"] == "precision" and "gpus other than L20" in also["where"]
    low, _ = also["rate_ratio_ci"]
    assert low > 5 and also["checks"] == ["baseline"]


def _documented() -> dict[str, tuple[str, str]]:
    """docs/diagnose.md's table: per run, what it is named alone and with its baseline."""
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0] in _runs():
            rows[cells[0]] = (cells[4], cells[5])
    return rows


def _named(found: dict) -> str:
    cause = found["cause"]
    key = cause["key"] if found["verdict"] in ("warn", "fail") else "none"
    text = f"{found['verdict']} {key}"
    return text + "".join(f" + {a['key']}" for a in cause.get("also", []))


@pytest.mark.parametrize("run", [slow_param(name) for name in _runs()])
def test_the_documented_matrix_is_what_diagnose_says(store: Path, run: str) -> None:
    """Every committed run, alone and against its baseline: the verdict and cause written in
    docs/diagnose.md (produced by sample_data/confusion.py over the whole corpus)."""
    documented = _documented()
    assert run in documented, f"{run} is not in docs/diagnose.md's table"
    alone, based = documented[run]
    assert _named(_cause(store, run)) == alone
    baseline = _runs()[run]["baseline"]
    if baseline is not None and based != "-":
        assert _named(_cause(store, run, baseline)) == based


def test_the_corpus_subset_is_documented() -> None:
    assert set(_documented()) == set(_runs())
    assert re.search(r"false alarms 0 of \d+ healthy or improved", DOC.read_text())
