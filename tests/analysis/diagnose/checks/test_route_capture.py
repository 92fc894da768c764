"""The ``route_capture`` check (``analysis/diagnose/checks/route_capture.py``) on the held-out
Qwen2-MoE family (tests/data/held_out ``m-*``, two steps each): routes misaligned (a position or
a layer off) or unrelated on most (token, layer) routes are a capture bug; numeric flips are
not, nor the routes of far-apart weights, which are their positions' routes."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from mismatchctl import api
from mismatchctl import schema as S
from mismatchctl.analysis.diagnose.checks import route_capture
from mismatchctl.stats import routing_sums as R
from tests.analysis.diagnose.stores.held_out import HELD_OUT
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


def test_far_apart_weights_route_their_own_positions(held_out_store: Path) -> None:
    """A pre-training checkpoint served (``m-pol-early``): under half the layer routes agree (28%),
    as in a capture bug, but 8x more than set a position or a layer off: the routes are their
    positions', no capture bug; the policy is named, never the routes' capture."""
    found, check = _capture(held_out_store, "m-pol-early")
    row = check["evidence"]["runs"]["m-pol-early"]
    best = max(row["alignment"].values())
    assert row["routing_layer_agreement"] < route_capture.T.CAPTURE_LAYER_AGREEMENT
    assert row["routing_layer_agreement"] > route_capture.T.ALIGNED_OVER_SHIFTED * best
    assert check["verdict"] == "ok" and not row["capture"] and "misaligned" not in row
    assert "not a capture bug" in check["finding"]
    assert found["cause"]["key"] == "policy"


@pytest.mark.parametrize(
    ("run", "shift"),
    [("m-capture-layers", "layer_below"), ("m-replay-late", "position_before")],
)
def test_misaligned_routes_name_their_shift(held_out_store: Path, run: str, shift: str) -> None:
    """Each layer dumped in the next layer's slot, and a trainer replaying each position's routes
    at the next: at their shift the routes agree (100%, 98.5%), aligned they do not."""
    found, check = _capture(held_out_store, run)
    row = check["evidence"]["runs"][run]
    assert row["misaligned"] == shift and row["alignment"][shift] > 0.95
    assert check["verdict"] == "fail" and "misaligned" in check["finding"]
    assert found["cause"]["key"] == "routing_capture"


def _m(agree: float) -> dict[str, float]:
    return {R.ROUTING_LAYER_AGREEMENT: agree}


def _shifts(*values: float | None) -> dict[str, float | None]:
    return dict(zip(R.SHIFTS, values, strict=True))


def test_the_alignment_test_at_its_thresholds() -> None:
    """Misaligned: a shift at half or more, above the aligned share; unrelated: under half and
    under twice the best shift; its positions' routes: under half, twice the best shift or
    more; parts written before the test: under half alone."""
    t = route_capture.T
    half = t.CAPTURE_LAYER_AGREEMENT
    misaligned = route_capture.alignment(_m(0.05), _shifts(0.03, t.MISALIGNED_AGREEMENT, 0, 0))
    assert misaligned.capture and misaligned.misaligned == "position_after"
    assert not route_capture.alignment(_m(0.9), _shifts(0.6, 0.05, 0, 0)).capture
    unrelated = route_capture.alignment(_m(0.05), _shifts(0.03, 0.03, 0, 0))
    assert unrelated.capture and unrelated.misaligned is None
    edge = t.ALIGNED_OVER_SHIFTED * 0.1
    own = route_capture.alignment(_m(edge), _shifts(0.1, 0.02, 0, 0))
    assert not own.capture and own.own
    assert route_capture.alignment(_m(edge - 1e-9), _shifts(0.1, 0.02, 0, 0)).capture
    assert route_capture.alignment(_m(half - 1e-9), None).capture
    assert route_capture.alignment(_m(half - 1e-9), _shifts(None, None, None, None)).capture
    assert not route_capture.alignment(_m(half), None).capture


def test_parts_ingested_before_the_test_keep_the_old_rule(tmp_path: Path) -> None:
    """Routing parts without the alignment test's column (ingested before it): under half the
    layer routes agreeing is a capture bug, and the finding says to ingest again to tell
    misaligned routes from far-apart weights."""
    store = tmp_path / "store"
    api.ingest([HELD_OUT / "m-pol-early"], "early", store=store)
    st = api.open_store(store)
    for part in st.parts("early", "routing"):
        path = st.part_path(part)
        pq.write_table(pq.read_table(path).drop_columns([S.ROUTE_SHIFTED]), path)
    found = api.diagnose("early", store=store).section_dict()
    check = next(c for c in found["checks"] if c["name"] == route_capture.NAME)
    assert "alignment" not in check["evidence"]["runs"]["early"]
    assert check["verdict"] == "fail" and "ingest the run again" in check["finding"]
