"""The cause ``routing_capture`` (``analysis/diagnose/causes/routing_capture.py``)."""

from __future__ import annotations

from pathlib import Path

from mismatchctl.analysis.diagnose.causes import routing_capture
from tests.analysis.diagnose.stores import calibration
from tests.planted import diagnosis


def test_routes_captured_late_are_a_capture_bug_and_replay_is_not_advised(
    calibration_store: Path,
) -> None:
    """Routes dumped one position late: they disagree on most tokens while the logprobs are
    those of replay; never advise replaying them."""
    found = calibration._cause(calibration_store, "moe-capture-shift")
    cause = found["cause"]
    assert cause["key"] == "routing_capture" and found["verdict"] == "fail"
    assert "do not enable or trust routing replay" in cause["next"]
    flips = next(c for c in found["checks"] if c["name"] == "routing_flips")
    assert flips["verdict"] == "ok" and "R3" not in (flips["next"] or "")


def test_a_fault_of_the_logprobs_beside_routes_dumped_late_is_named(held_out_store: Path) -> None:
    """The held-out Qwen2-MoE family: routes dumped a position late beside an fp8 KV cache,
    over a healthy run with replay: the wrong routes first, the cache's uniform excess beside
    them (the dump bug changes no logprob)."""
    found = diagnosis(held_out_store, "m-combo-capture-fp8kv", "m-r3-b").section_dict()
    cause = found["cause"]
    assert cause["key"] == "routing_capture"
    assert [a["key"] for a in cause["also"]] == ["precision"]


def test_a_trainer_replaying_misaligned_routes_is_the_capture_alone(held_out_store: Path) -> None:
    """A trainer replaying each position's routes at the next computes another function at
    every token (thousands of times its baseline): every check of the logprobs follows it, and
    nothing is named beside the routes."""
    for baseline in (None, "m-r3-b"):
        found = diagnosis(held_out_store, "m-replay-late", baseline).section_dict()
        assert found["cause"]["key"] == "routing_capture" and found["cause"]["also"] == []
        assert "do not enable or trust routing replay" in found["cause"]["next"]


def test_only_a_cause_that_is_not_another_function_stands_beside_wrong_routes() -> None:
    assert routing_capture.beside({"routing_capture", "precision"})
    assert not routing_capture.beside({"routing_capture", "precision", "policy"})
    assert not routing_capture.beside({"routing_capture", "semantics"})
