"""The ``route_capture`` check (``analysis/diagnose/checks/route_capture.py``) on the held-out
Qwen2-MoE family (tests/data/held_out ``m-*``, two steps each): routes unrelated on most
(token, layer) routes are a capture bug, numeric flips are not."""

from __future__ import annotations

from pathlib import Path

from mismatchctl.analysis.diagnose.checks import route_capture
from tests.planted import diagnosis


def _capture(store: Path, run: str) -> tuple[dict, dict]:
    found = diagnosis(store, run, None).section_dict()
    return found, next(c for c in found["checks"] if c["name"] == route_capture.NAME)


def test_each_layer_dumped_in_the_next_slot_is_a_capture_bug(held_out_store: Path) -> None:
    """No token's routes agree on every layer, so no flipped-vs-same ratio: the layer routes'
    agreement (0.04%) says it; replay is never advised."""
    found, check = _capture(held_out_store, "m-capture-layers")
    row = check["evidence"]["runs"]["m-capture-layers"]
    assert row["routing_layer_agreement"] < 0.01 and row["flipped_same_ratio"] is None
    assert check["verdict"] == "fail" and found["cause"]["key"] == "routing_capture"
    assert "do not enable or trust routing replay" in found["cause"]["next"]


def test_numeric_flips_are_no_capture_bug(held_out_store: Path) -> None:
    """Healthy and an fp8 router: most layer routes agree (98% and 92%)."""
    for run in ("m-h-a", "m-router-fp8"):
        _, check = _capture(held_out_store, run)
        row = check["evidence"]["runs"][run]
        assert check["verdict"] == "ok" and not row["capture"], run
        assert row["routing_layer_agreement"] > route_capture.T.CAPTURE_LAYER_AGREEMENT + 0.3
