"""The ``routing_flips`` check (``analysis/diagnose/checks/routing_flips.py``) on the held-out
Qwen2-MoE family (tests/data/held_out ``m-*``, two steps each): a healthy MoE's flips are the
model's own, judged only against a baseline of the same model."""

from __future__ import annotations

from pathlib import Path

from mismatchctl.analysis.diagnose.checks import routing_flips
from tests.planted import diagnosis


def _flips(store: Path, run: str, baseline: str | None = None) -> tuple[dict, dict]:
    found = diagnosis(store, run, baseline).section_dict()
    return found, next(c for c in found["checks"] if c["name"] == routing_flips.NAME)


def test_a_healthy_moe_flipping_more_than_the_sample_moe_raises_no_alarm(
    held_out_store: Path,
) -> None:
    """``m-h-a`` flips 1.9% of its layer routes, over the 1.5% the sample MoE's healthy runs
    were once judged by; alone and against another healthy run of its model, no alarm."""
    found, flips = _flips(held_out_store, "m-h-a")
    rate = flips["evidence"]["runs"]["m-h-a"]["layer_flip_rate"]
    assert rate > 0.015 and flips["verdict"] == "ok" and found["cause"]["key"] == "none"
    assert "give --baseline a healthy run" in flips["finding"]
    found, flips = _flips(held_out_store, "m-h-a", "m-h-b")
    excess = flips["evidence"]["runs"]["m-h-a"]["flip_excess"]
    assert excess < routing_flips.T.FLIP_EXCESS_WARN and flips["verdict"] == "ok"
    assert found["verdict"] == "ok" and found["cause"]["key"] == "none"


def test_a_router_in_fp8_is_judged_against_its_baseline(held_out_store: Path) -> None:
    """The engine's router logits rounded to e4m3: alone a rate no run can judge; over its
    baseline many times its flips, and the routing named."""
    _, flips = _flips(held_out_store, "m-router-fp8")
    assert flips["verdict"] == "ok"
    found, flips = _flips(held_out_store, "m-router-fp8", "m-h-a")
    assert flips["evidence"]["runs"]["m-router-fp8"]["flip_excess"] > 3
    assert flips["verdict"] == "fail" and "rollout routing replay" in flips["next"]
    named = [found["cause"]["key"], *(a["key"] for a in found["cause"]["also"])]
    assert "routing" in named


def test_over_a_baseline_that_replays_its_routes_the_flips_are_the_excess(
    held_out_store: Path,
) -> None:
    """A healthy run without replay over a run of the same model with replay (6x its mismatch):
    every flip is the run's own, and replay is what the baseline does that the run does not."""
    found, flips = _flips(held_out_store, "m-h-a", "m-r3-b")
    assert flips["evidence"]["runs"]["m-h-a"]["baseline_flip_rate"] == 0.0
    assert "none in the baseline, which replays its routes" in flips["finding"]
    assert flips["verdict"] == "fail" and found["cause"]["key"] == "routing"
    assert "rollout routing replay" in found["cause"]["next"]
