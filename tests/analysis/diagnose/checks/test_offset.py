"""The ``offset`` check (``analysis/diagnose/checks/offset.py``)."""

from __future__ import annotations

from tests.analysis.diagnose.stores import planted_causes


def test_fires_on_its_planted_cause_only(verdicts: dict) -> None:
    planted_causes.fires_on_its_cause_only("offset", verdicts)
