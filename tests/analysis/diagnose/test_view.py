"""``analysis/diagnose/view.py``: the verdict's facts, in the order the JSON's ``cause`` holds
them; which runner-up the verdict shows."""

from __future__ import annotations

from pathlib import Path

from mismatchctl.analysis.diagnose.causes.hypothesis import QUIET
from mismatchctl.analysis.diagnose.causes.row import CauseRow
from mismatchctl.analysis.diagnose.view import runner_up, verdict_facts
from tests.planted import diagnosis


def _row(key: str, verdict: str, lost: str) -> CauseRow:
    return CauseRow(
        key=key,
        cls=key,
        label=f"the {key}",
        verdict=verdict,
        variant=None,
        where=None,
        share=0.0,
        score=0.0,
        rate_ratio=None,
        rate_ratio_ci=None,
        because="",
        checks=[],
        against=[],
        lost=lost,
    )


def test_the_runner_up_shown_is_the_first_alarmed_else_a_quiet_one_with_a_reason() -> None:
    quiet = _row("data", "ok", QUIET)
    twin = _row("policy", "ok", f"{QUIET}; the steps split (...)")
    alarmed = _row("template", "warn", "explains less")
    assert runner_up([quiet, twin, alarmed]) is alarmed
    assert runner_up([quiet, twin]) is twin
    assert runner_up([quiet]) is None
    assert runner_up([]) is None


def test_the_verdict_shows_the_twin_the_data_cannot_tell_apart(held_out_store: Path) -> None:
    """``un-fp8kv-splitkv-restart`` over ``h-b``: a code path of the steps after the restart is
    named, no other cause's checks fire, and the policy's reason (the steps split, but no token
    id moved on its own) is the runner-up the terminal and the HTML show, as the JSON holds it."""
    d = diagnosis(held_out_store, "un-fp8kv-splitkv-restart", "h-b")
    facts = {f.label: f.value for f in verdict_facts(d).facts}
    cause = d.section_dict()["cause"]
    assert all(r["verdict"] == "ok" for r in cause["runner_ups"])
    policy = next(r for r in cause["runner_ups"] if r["key"] == "policy")
    assert facts["runner-up"] == f"{policy['label']}: {policy['lost']}"
    assert "cannot tell other weights from the arithmetic" in facts["runner-up"]
    labels = [f.label for f in verdict_facts(d).facts]
    assert labels.index("evidence") < labels.index("runner-up") < labels.index("next")
