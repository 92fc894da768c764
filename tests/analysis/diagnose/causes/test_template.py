"""The cause ``template`` (``analysis/diagnose/causes/template.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.diagnose.stores import relative


@pytest.mark.parametrize("run", ["tool-loud", "path-kv", "spike-loud", "healthy", "improved"])
def test_numerics_are_not_taken_for_a_template_fault(relative_store: Path, run: str) -> None:
    """Later turns hotter as a whole (64x), a fault at long KV positions, spike steps: the
    turn starts are no hotter than the rest of their turns, or not by the count of large-|r|
    tokens."""
    checks = relative._checks(relative_store, run)
    assert checks["turn_edges"].verdict == "ok"
    assert checks["cause"].evidence.cause != "template"
