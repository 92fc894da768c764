"""The sample MoE runs through the package: ingested with their manifest options (three route
encodings), their routing metrics equal to the hand computation of tests/sample_data/moe_routes.py,
and what diagnose says of each (sample_data/README.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mismatchctl import api
from mismatchctl.sample_runs import ingest_demo, load_manifest
from mismatchctl.store import open_store
from tests.sample_data.moe_routes import read_moe_run, routing

MOE_RUNS = ("moe", "moe-r3", "moe-capture-bug")


@pytest.fixture(scope="module")
def moe_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = [r for r in load_manifest() if r.name in MOE_RUNS]
    if len(runs) != len(MOE_RUNS):
        pytest.skip("the committed sample data has no MoE runs")
    store = tmp_path_factory.mktemp("moe") / "store"
    ingest_demo(open_store(store), runs)
    return store


def test_sample_moe_routing_metrics_match_the_hand_computation(moe_store: Path) -> None:
    manifest = {r.name: r for r in load_manifest()}
    rep = api.report(list(MOE_RUNS), store=moe_store).to_dict()["routing"]
    for name in MOE_RUNS:
        want = routing(read_moe_run(manifest[name].path, manifest[name].routes.top_k))
        got = rep[name]["metrics"]
        assert (rep[name]["layers"], rep[name]["top_k"]) == (4, 2)
        assert got["routing_token_agreement"] == pytest.approx(want.token_agreement, rel=1e-12)
        assert got["routing_missing_tokens"] == want.model_tokens - want.compared
        assert got["routing_unpaired_tokens"] == 0  # the last prompt position is in every dump
        same = want.same.mean()
        assert got["vllm_kl_same"] == pytest.approx(same, rel=1e-9)
        if len(want.flipped):
            assert got["vllm_kl_flipped"] == pytest.approx(want.flipped.mean(), rel=1e-9)
            share = want.k3_share_flipped
            assert got["routing_k3_share_flipped"] == pytest.approx(share, rel=1e-9)
        else:
            assert got["vllm_kl_flipped"] is None and got["routing_k3_share_flipped"] == 0
        replay = name != "moe"
        assert rep[name]["routing_replay"] is replay
        if replay:
            violated = 1 - want.token_agreement
            assert got["r3_violation_fraction"] == pytest.approx(violated, rel=1e-12, abs=0)
    assert rep["moe-r3"]["metrics"]["r3_violation_fraction"] == 0


def test_sample_moe_diagnosis(moe_store: Path) -> None:
    checks = {
        name: {c.name: c for c in api.diagnose(name, store=moe_store).checks} for name in MOE_RUNS
    }
    # natural routing: its flips carry most of the K3, as every MoE's without replay do; how
    # many flip is the model's own: said, no alarm (R3 would remove most of their share)
    flips = checks["moe"]["routing_flips"]
    assert (
        flips.verdict == "ok" and "would remove most of the flipped tokens' share" in flips.finding
    )
    assert "routing_replay" not in checks["moe"]
    assert checks["moe"]["cause"].evidence.cause == "none"
    assert checks["moe-r3"]["cause"].evidence.cause == "none"
    assert checks["moe-r3"]["routing_replay"].verdict == "ok"
    assert "routing_flips" not in checks["moe-r3"]
    bug = checks["moe-capture-bug"]["routing_replay"]
    assert bug.verdict == "fail" and "capture or alignment bug" in bug.next
    cause = checks["moe-capture-bug"]["cause"]
    assert cause.verdict == "fail" and cause.evidence.cause == "routing_capture"
    # the replayed run's mismatch is a fraction of the natural run's
    kl = {
        name: api.report([name], store=moe_store).to_dict()["groups"][0]["metrics"]["vllm_kl"]
        for name in MOE_RUNS
    }
    assert kl["moe-r3"] < kl["moe"] / 3
    assert kl["moe-capture-bug"] == pytest.approx(kl["moe-r3"], rel=1e-12)
    assert np.isfinite(list(kl.values())).all()
