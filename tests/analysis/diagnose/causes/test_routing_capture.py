"""The cause ``routing_capture`` (``analysis/diagnose/causes/routing_capture.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.analysis.diagnose.stores import calibration


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
